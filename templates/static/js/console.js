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

  // On a phone the top bar's Menu button opens and closes the nav and the account (css: .topbar.menu-open).
  var topbar = document.querySelector(".topbar");
  var menuButton = topbar && topbar.querySelector(".menu-button");
  function setPhoneMenu(open) {
    topbar.classList.toggle("menu-open", open);
    menuButton.setAttribute("aria-expanded", open ? "true" : "false");
  }
  if (menuButton) {
    menuButton.addEventListener("click", function () { setPhoneMenu(!topbar.classList.contains("menu-open")); });
  }

  // The nav's menus: one open at a time, closed by a click elsewhere or Escape.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.nav-group[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
    if (menuButton && !topbar.contains(event.target)) setPhoneMenu(false);
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var open = document.querySelectorAll("details.nav-group[open]");
    open.forEach(function (menu) {
      var inside = menu.contains(document.activeElement);
      menu.open = false;
      if (inside) menu.querySelector("summary").focus();  // the focus stays where it was, on the menu's name
    });
    if (!open.length && menuButton && topbar.classList.contains("menu-open")) {
      // With no group open, Escape closes the phone's menu, and gives the focus back to its button rather than to nothing.
      var inside = topbar.contains(document.activeElement);
      setPhoneMenu(false);
      if (inside) menuButton.focus();
    }
  });
})();
