/*
 * The validity calculator: the widget in includes/validity-calculator.html.
 *
 * The arithmetic below is lockguide.validity, written again in JavaScript so the
 * page can run it in the browser:
 *
 *   drift    = ttl * driftFactor + 2 ms          (drift_ms)
 *   validity = ttl - elapsed - drift             (validity_ms)
 *   quorum   = floor(n / 2) + 1                  (quorum)
 *   acquired = votes >= quorum && validity > 0   (judge(...).acquired)
 *
 * tests/docs/test_calculator.py runs these functions under Node and holds them equal
 * to the Python ones over a grid of inputs, so the two cannot drift apart.
 *
 * The script is loaded on every page (extra_javascript) and does nothing on a
 * page without a [data-validity-calculator] element.
 */
(function (root) {
  "use strict";

  var DRIFT_FLOOR_MS = 2;

  function driftMs(ttlMs, driftFactor) {
    return ttlMs * driftFactor + DRIFT_FLOOR_MS;
  }

  function validityMs(ttlMs, elapsedMs, driftFactor) {
    return ttlMs - elapsedMs - driftMs(ttlMs, driftFactor);
  }

  function quorum(nodes) {
    if (!(nodes >= 1)) {
      throw new RangeError("a quorum needs at least one master");
    }
    return Math.floor(nodes / 2) + 1;
  }

  function judge(ttlMs, elapsedMs, votes, nodes, driftFactor) {
    var drift = driftMs(ttlMs, driftFactor);
    var validity = ttlMs - elapsedMs - drift;
    var needed = quorum(nodes);
    var majority = votes >= needed;
    return {
      driftMs: drift,
      validityMs: validity,
      needed: needed,
      majority: majority,
      acquired: majority && validity > 0,
    };
  }

  var api = { DRIFT_FLOOR_MS: DRIFT_FLOOR_MS, driftMs: driftMs, validityMs: validityMs,
              quorum: quorum, judge: judge };

  if (typeof module !== "undefined" && module.exports) {
    module.exports = api;  // Node: the test imports the arithmetic only
    return;
  }
  root.lockguideValidity = api;

  // ---- the widget ------------------------------------------------------------

  function number(form, name) {
    var field = form.elements.namedItem(name);
    return field && field.value.trim() !== "" ? Number(field.value) : NaN;
  }

  function problem(ttl, elapsed, factor, nodes, votes) {
    if (!(ttl > 0) || !Number.isInteger(ttl)) return "The TTL must be a whole number of milliseconds above 0.";
    if (!(elapsed >= 0)) return "The time spent acquiring must be 0 ms or more.";
    if (!(factor >= 0) || !isFinite(factor)) return "The drift factor must be 0 or more (0.01 is 1 %).";
    if (!(nodes >= 1) || !Number.isInteger(nodes)) return "There must be a whole number of nodes, at least 1.";
    if (!(votes >= 0) || !Number.isInteger(votes)) return "Nodes that answered yes must be a whole number, 0 or more.";
    if (votes > nodes) return "More nodes answered yes than there are nodes.";
    return null;
  }

  function ms(value) {
    return (Math.round(value * 1000) / 1000).toLocaleString("en-US") + " ms";
  }

  function update(widget) {
    var form = widget.querySelector("form");
    var out = function (name) { return widget.querySelector('[data-out="' + name + '"]'); };
    var ttl = number(form, "ttl"), elapsed = number(form, "elapsed");
    var factor = number(form, "factor"), nodes = number(form, "nodes"), votes = number(form, "votes");
    var error = problem(ttl, elapsed, factor, nodes, votes);
    widget.classList.toggle("lg-calc--invalid", error !== null);
    if (error !== null) {
      out("verdict").textContent = error;
      ["validity", "majority", "margin"].forEach(function (n) {
        out(n).textContent = "–";
        delete out(n).dataset.value;
      });
      delete out("verdict").dataset.value;
      return;
    }
    var v = judge(ttl, elapsed, votes, nodes, factor);
    out("validity").textContent = ms(Math.max(0, v.validityMs)) +
      (v.validityMs <= 0 ? " (none: " + ms(v.validityMs) + ")" : "");
    out("majority").textContent = (v.majority ? "yes" : "no") + ": " + votes + " of " + nodes +
      " answered, " + v.needed + " needed";
    out("margin").textContent = ms(v.driftMs) + " (" + ms(ttl * factor) + " for drift + " +
      DRIFT_FLOOR_MS + " ms floor)";
    var verdict;
    if (v.acquired) {
      verdict = "Acquired. Finish the work, and any write it makes, within " + ms(v.validityMs) + ".";
    } else if (!v.majority) {
      verdict = "Not acquired: no majority. Release on every node at once, then retry after a random delay.";
    } else {
      verdict = "Not acquired: a majority said yes, but no validity is left. Release on every node at once.";
    }
    out("verdict").textContent = verdict;
    // Exact values for readers' tools and the browser test (the text above is rounded).
    out("validity").dataset.value = String(v.validityMs);
    out("margin").dataset.value = String(v.driftMs);
    out("majority").dataset.value = v.majority ? "yes" : "no";
    out("verdict").dataset.value = v.acquired ? "yes" : "no";
    widget.classList.toggle("lg-calc--acquired", v.acquired);
  }

  function init() {
    var widgets = document.querySelectorAll("[data-validity-calculator]");
    Array.prototype.forEach.call(widgets, function (widget) {
      if (widget.dataset.ready === "1") return;
      widget.dataset.ready = "1";
      var form = widget.querySelector("form");
      if (!form) return;
      form.addEventListener("input", function () { update(widget); });
      form.addEventListener("submit", function (event) { event.preventDefault(); });
      update(widget);
    });
  }

  if (typeof root.document$ !== "undefined" && root.document$.subscribe) {
    root.document$.subscribe(init);  // Material's page-load stream (instant navigation too)
  } else if (typeof document !== "undefined") {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
    else init();
  }
})(typeof window !== "undefined" ? window : this);
