// Import page: send the query log with XMLHttpRequest so the upload itself shows a progress bar,
// then open the import job's page, whose own bar follows the import. Without JavaScript the form
// posts normally and the server redirects to the same job page.
(function () {
  "use strict";

  var form = document.getElementById("import-form");
  if (!form || !window.FormData || !window.XMLHttpRequest) return;

  var fileInput = form.querySelector("input[type=file]");
  var button = document.getElementById("upload-button");
  var errorBox = document.getElementById("upload-error");
  var progressCell = document.getElementById("upload-progress");
  var bar = progressCell.querySelector("progress");
  var percent = document.getElementById("upload-percent");
  var statusLine = document.getElementById("upload-status");
  var maxBytes = parseInt(form.getAttribute("data-max-bytes"), 10) || 0;

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
    statusLine.textContent = "";
    button.disabled = false;
    progressCell.hidden = true;
  }

  function setProgress(value) {
    bar.value = value;
    bar.textContent = value + "%";
    percent.textContent = value + "%";
  }

  function errorMessage(xhr) {
    // An expired session answers with the login page (the redirect is followed inside the request).
    if (xhr.responseURL && xhr.responseURL.indexOf("/login/") !== -1) return "Your session has expired. Reload the page and log in again.";
    try {
      var body = JSON.parse(xhr.responseText);
      if (body && body.error && body.error.message) return body.error.message;
    } catch (ignored) { /* not JSON: fall through */ }
    return "The upload failed (HTTP " + xhr.status + ").";
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    errorBox.hidden = true;
    var file = fileInput.files && fileInput.files[0];
    if (!file) { showError("Choose a file to import."); return; }
    if (maxBytes && file.size > maxBytes) {
      showError("The file is " + file.size.toLocaleString() + " bytes; the limit is " + maxBytes.toLocaleString() + " bytes.");
      return;
    }

    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
    xhr.upload.addEventListener("progress", function (e) {
      if (e.lengthComputable) setProgress(Math.floor((100 * e.loaded) / e.total));
    });
    xhr.upload.addEventListener("load", function () {
      setProgress(100);
      statusLine.textContent = "Uploaded; checking the file…";
    });
    xhr.addEventListener("load", function () {
      if (xhr.status === 202) {
        var body = JSON.parse(xhr.responseText);
        statusLine.textContent = "Import started. Opening its progress page…";
        window.location.assign(body.job_url);
      } else {
        showError(errorMessage(xhr));
      }
    });
    xhr.addEventListener("error", function () { showError("The server could not be reached. Check your connection and try again."); });
    xhr.addEventListener("abort", function () { showError("The upload was cancelled."); });

    button.disabled = true;
    progressCell.hidden = false;
    setProgress(0);
    statusLine.textContent = "Uploading " + file.name + "…";
    xhr.send(new FormData(form));
  });
})();
