// Console-wide htmx glue: say so when a fragment request fails instead of doing nothing.
(function () {
  "use strict";

  function showError(message) {
    var banner = document.getElementById("htmx-error");
    if (!banner) return;
    banner.textContent = message;
    banner.hidden = false;
  }

  function hideError() {
    var banner = document.getElementById("htmx-error");
    if (banner) banner.hidden = true;
  }

  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : "";
    showError("The server could not complete the request (HTTP " + status + "). Try again, or reload the page.");
  });
  document.addEventListener("htmx:sendError", function () {
    showError("The server could not be reached. Check your connection and try again.");
  });
  document.addEventListener("htmx:afterSwap", hideError);

  // A form with data-confirm asks before it is sent (the page's policy allows no inline handlers).
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  }, true);

  // The nav's menus: one open at a time, closed by a click elsewhere or Escape.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.nav-group[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll("details.nav-group[open]").forEach(function (menu) { menu.open = false; });
  });
})();
