// The playground's streamed answer: the question is posted to data-stream-url and the answer's words
// are shown as the model writes them (server-sent events read with fetch); when it ends, the whole
// panel (citations, routing path, latency) replaces the live one. Browsers without streaming fetch
// keep htmx's form post (one swap when the answer is complete), and without JavaScript the page posts.
(function () {
  "use strict";

  function streams() {
    return !!(window.fetch && window.ReadableStream && window.TextDecoder && window.FormData);
  }

  function swapPanel(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    var fresh = template.content.querySelector("#playground");
    var panel = document.getElementById("playground");
    if (!fresh || !panel) return false;
    panel.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
    return true;
  }

  function showError(message) {
    var banner = document.getElementById("htmx-error");
    if (!banner) return;
    banner.textContent = message;
    banner.hidden = false;
  }

  // The live answer card, built with DOM calls: streamed text is only ever set as text.
  function liveResult(panel) {
    var old = panel.querySelector("#playground-result");
    if (old) old.remove();
    var section = document.createElement("section");
    section.className = "result-grid";
    section.id = "playground-result";
    section.innerHTML =
      '<div class="result-main"><article class="card"><div class="card-head"><h2>Answer</h2>' +
      '<span><span class="badge">answered by <strong id="answered-by">…</strong></span></span></div>' +
      '<p class="answer streaming" id="answer" aria-live="polite" aria-busy="true"></p></article></div>';
    panel.appendChild(section);
    return section;
  }

  function handle(name, data, state) {
    if (name === "meta") {
      state.section.querySelector("#answered-by").textContent = data.expert_name || data.expert || "nobody";
    } else if (name === "delta") {
      state.answer.appendChild(document.createTextNode(data.text));
    } else if (name === "done") {
      state.done = swapPanel(data.html);
    } else if (name === "error") {
      var note = document.createElement("p");
      note.className = "field-error";
      note.setAttribute("role", "alert");
      note.textContent = data.message;
      state.answer.after(note);
      state.answer.removeAttribute("aria-busy");
      state.done = true;
    }
  }

  // Server-sent events: blocks separated by a blank line, "event:" and "data:" lines in each.
  function read(response, state) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function pump() {
      return reader.read().then(function (chunk) {
        buffer += decoder.decode(chunk.value || new Uint8Array(), { stream: !chunk.done });
        var blocks = buffer.split("\n\n");
        buffer = chunk.done ? "" : blocks.pop();
        blocks.forEach(function (block) {
          var name = "message", data = "";
          block.split("\n").forEach(function (line) {
            if (line.indexOf("event: ") === 0) name = line.slice(7);
            else if (line.indexOf("data: ") === 0) data += line.slice(6);
          });
          if (data) handle(name, JSON.parse(data), state);
        });
        if (!chunk.done) return pump();
        if (!state.done) showError("The answer stopped before it was complete. Try again.");
      });
    }
    return pump();
  }

  function ask(form) {
    var panel = document.getElementById("playground");
    var button = form.querySelector("button[type=submit]");
    var spinner = document.getElementById("playground-spinner");
    var banner = document.getElementById("htmx-error");
    if (banner) banner.hidden = true;
    if (button) button.disabled = true;
    if (spinner) spinner.classList.add("htmx-request");
    var state = { section: null, answer: null, done: false };
    // The previous answer stays until the next one starts, dimmed: it no longer answers what is asked.
    var previous = panel.querySelector("#playground-result");
    if (previous) {
      previous.classList.add("stale");
      previous.setAttribute("aria-busy", "true");
    }
    function idle() {
      if (button && document.contains(button)) button.disabled = false;
      if (spinner && document.contains(spinner)) spinner.classList.remove("htmx-request");
      if (previous && document.contains(previous)) {  // nothing replaced it (the request failed): it is current again
        previous.classList.remove("stale");
        previous.removeAttribute("aria-busy");
      }
    }
    fetch(form.dataset.streamUrl, {
      method: "POST", body: new FormData(form), credentials: "same-origin",
      headers: { "Accept": "text/event-stream, text/html" },
    }).then(function (response) {
      if (response.redirected) {  // signed out meanwhile: the login page, then back here
        window.location.assign(response.url);
        return null;
      }
      var type = response.headers.get("Content-Type") || "";
      if (type.indexOf("text/event-stream") !== 0) {
        // Form errors (400) and "cannot answer now" (503) come back as the panel itself.
        return response.text().then(function (html) {
          if (!swapPanel(html)) showError("The server could not complete the request (HTTP " + response.status + "). Try again, or reload the page.");
        });
      }
      state.section = liveResult(panel);
      state.answer = state.section.querySelector("#answer");
      return read(response, state);
    }).catch(function () {
      showError("The server could not be reached. Check your connection and try again.");
    }).then(idle, idle);
  }

  // Capture phase: this runs before htmx's own submit listener on the form, which it then never sees.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.streamUrl || !streams()) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    ask(form);
  }, true);
})();
