/*
 * Wide tables and code that scroll sideways inside their own box can only be scrolled
 * with a mouse or a touch screen unless the box itself can take keyboard focus.
 * This marks each such box, as laid out on the reader's screen, as a focusable region
 * with a name ("Table: ..." / "Code: ..."), and unmarks it again when the screen grows
 * and the box no longer scrolls. Material already does this for Markdown code blocks
 * (pre > code); this covers tables and notebook cells.
 */
(function () {
  "use strict";

  var BOXES = [
    ".md-typeset__scrollwrap",          // Material's wrapper around every table
    ".jupyter-wrapper .highlight-ipynb", // a notebook cell's code
    ".jupyter-wrapper .jp-OutputArea-output pre",
  ].join(", ");

  function words(text, limit) {
    var flat = (text || "").replace(/\s+/g, " ").trim();
    return flat.length > limit ? flat.slice(0, limit - 1) + "…" : flat;
  }

  function nameOf(box) {
    var table = box.querySelector("table");
    if (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent;
      });
      return "Table: " + words(heads.join(", ") || table.textContent, 80);
    }
    var firstLine = (box.textContent || "").trim().split("\n")[0];
    return "Code: " + words(firstLine, 80);
  }

  function focusableInside(box) {
    return box.querySelector("a[href], button, input, select, textarea, [tabindex]") !== null;
  }

  function mark(box) {
    var scrolls = box.scrollWidth > box.clientWidth + 1;
    var ours = box.hasAttribute("data-lg-scroll-region");
    if (scrolls && !ours && !box.hasAttribute("tabindex") && !focusableInside(box)) {
      box.setAttribute("data-lg-scroll-region", "");
      box.setAttribute("tabindex", "0");
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", nameOf(box) + " (scrolls sideways)");
    } else if (!scrolls && ours) {
      ["data-lg-scroll-region", "tabindex", "role", "aria-label"].forEach(function (name) {
        box.removeAttribute(name);
      });
    }
  }

  function markAll() {
    Array.prototype.forEach.call(document.querySelectorAll(BOXES), mark);
  }

  var pending = null;
  window.addEventListener("resize", function () {
    if (pending !== null) window.clearTimeout(pending);
    pending = window.setTimeout(markAll, 150);
  });
  if (typeof window.document$ !== "undefined" && window.document$.subscribe) {
    window.document$.subscribe(markAll); // Material's page-load stream
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", markAll);
  } else {
    markAll();
  }
})();
