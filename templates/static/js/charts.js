// Glue between the pages and the vendored Chart.js (vendor/chart.umd.min.js, MIT): every
// <figure data-src data-chart> fetches its JSON and hands it to Chart.js, which draws into the figure's
// <canvas>. Nothing is read from colour alone: over-threshold bars are hatched and labelled "over", the
// reference lines differ by dash, line series differ by dash pattern and point shape and are named in the
// legend, and every chart has a table view on its page. The figure's fallback text stays without JS.
(function () {
  "use strict";

  var ACCENT = "#2458c6", BAD = "#c62828", BAD_SOFT = "#fdecea", TEXT = "#1f2328", MUTED = "#646d78";
  // Series styles: each differs from the others by dash pattern and point shape, not only by colour.
  var STYLES = [
    { color: ACCENT, dash: [], point: "circle", words: "solid, circles" },
    { color: "#b86200", dash: [6, 4], point: "rect", words: "dashed, squares" },
    { color: "#2f8f5b", dash: [2, 3], point: "triangle", words: "dotted, triangles" },
    { color: "#8a5cc2", dash: [10, 4, 2, 4], point: "crossRot", words: "dash-dot, crosses" },
  ];
  var requests = {};

  function getJSON(url) {
    if (!requests[url]) {
      requests[url] = fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); });
    }
    return requests[url];
  }

  function pct(x) { return (100 * x).toFixed(1) + "%"; }

  function hatch() {
    var tile = document.createElement("canvas");
    tile.width = tile.height = 8;
    var c = tile.getContext("2d");
    c.fillStyle = BAD_SOFT;
    c.fillRect(0, 0, 8, 8);
    c.strokeStyle = BAD;
    c.lineWidth = 2;
    c.beginPath();
    c.moveTo(0, 8); c.lineTo(8, 0);
    c.moveTo(-2, 2); c.lineTo(2, -2);
    c.moveTo(6, 10); c.lineTo(10, 6);
    c.stroke();
    return c.createPattern(tile, "repeat");
  }

  function baseOptions() {
    return {
      responsive: true, maintainAspectRatio: false, animation: false,
      interaction: { mode: "nearest", intersect: false },
      plugins: { legend: { position: "bottom", labels: { usePointStyle: true, boxWidth: 9, boxHeight: 9, font: { size: 12 } } } },
    };
  }

  // --- heatmap: each expert's share against the fair share and the alarm threshold ---------------

  function shareChart(figure, canvas, data) {
    var rows = data.experts || [];
    if (!rows.length) {
      canvas.parentNode.replaceWith(document.createTextNode("No experts to chart."));
      return null;
    }
    var fair = 100 * (data.fair_share || 0), alarm = 100 * (data.threshold || 0);
    var top = Math.max.apply(null, rows.map(function (r) { return 100 * r.share; }).concat([fair, alarm]));
    var referenceLines = {
      id: "referenceLines",
      afterDatasetsDraw: function (chart) {
        var ctx = chart.ctx, area = chart.chartArea, x = chart.scales.x;
        [[fair, TEXT, [], "fair " + fair.toFixed(1) + "%", area.top - 6],
         [alarm, BAD, [5, 4], "alarm " + alarm.toFixed(1) + "%", area.top - 6]].forEach(function (line, i) {
          if (!(line[0] > 0)) return;
          var px = x.getPixelForValue(line[0]);
          ctx.save();
          ctx.strokeStyle = line[1]; ctx.lineWidth = 2; ctx.setLineDash(line[2]);
          ctx.beginPath(); ctx.moveTo(px, area.top); ctx.lineTo(px, area.bottom); ctx.stroke();
          ctx.fillStyle = line[1]; ctx.font = "11px sans-serif"; ctx.textAlign = i ? "left" : "right";
          ctx.fillText(line[3], px + (i ? 4 : -4), line[4]);
          ctx.restore();
        });
      },
    };
    var valueLabels = {
      id: "valueLabels",
      afterDatasetsDraw: function (chart) {
        var ctx = chart.ctx;
        ctx.save();
        ctx.font = "11px sans-serif"; ctx.fillStyle = TEXT; ctx.textBaseline = "middle";
        chart.data.datasets.forEach(function (dataset, d) {
          chart.getDatasetMeta(d).data.forEach(function (bar, i) {
            var v = dataset.data[i];
            if (v === null || v === undefined) return;
            ctx.fillText(v.toFixed(1) + "%" + (d === 1 ? " over" : ""), bar.x + 4, bar.y);
          });
        });
        ctx.restore();
      },
    };
    var options = baseOptions();
    options.indexAxis = "y";
    options.layout = { padding: { top: 16, right: 8 } };
    options.scales = {
      x: { beginAtZero: true, suggestedMax: top * 1.25, ticks: { callback: function (v) { return v + "%"; } },
           title: { display: true, text: "share of routed requests" } },
      y: { ticks: { autoSkip: false } },
    };
    options.plugins.legend.labels.usePointStyle = false;
    options.plugins.legend.labels.generateLabels = function (chart) {
      var items = Chart.defaults.plugins.legend.labels.generateLabels(chart);
      items.push({ text: "fair share (solid line)", fillStyle: "rgba(0,0,0,0)", strokeStyle: TEXT, lineWidth: 2, lineDash: [] });
      items.push({ text: "alarm threshold (dashed line)", fillStyle: "rgba(0,0,0,0)", strokeStyle: BAD, lineWidth: 2, lineDash: [4, 3] });
      return items;
    };
    options.plugins.legend.onClick = function (e, item, legend) {
      if (item.datasetIndex !== undefined) Chart.defaults.plugins.legend.onClick.call(this, e, item, legend);
    };
    options.plugins.tooltip = { callbacks: { label: function (c) { return c.dataset.label + ": " + c.parsed.x.toFixed(1) + "%"; } } };
    var chart = new Chart(canvas, {
      type: "bar",
      data: {
        labels: rows.map(function (r) { return r.name + (r.over_threshold ? " (over)" : ""); }),
        datasets: [
          { label: "share", grouped: false, backgroundColor: ACCENT,
            data: rows.map(function (r) { return r.over_threshold ? null : +(100 * r.share).toFixed(2); }) },
          { label: "share over the alarm threshold (hatched)", grouped: false, backgroundColor: hatch(), borderColor: BAD, borderWidth: 1.5,
            data: rows.map(function (r) { return r.over_threshold ? +(100 * r.share).toFixed(2) : null; }) },
        ],
      },
      options: options,
      plugins: [referenceLines, valueLabels],
    });
    var caption = document.createElement("figcaption");
    caption.className = "muted small";
    caption.textContent = "Load CV " + Number(data.load_cv).toFixed(2) + " · hatched bars marked “over”: above the alarm threshold of " +
      pct(data.threshold) + " · solid line: fair share " + pct(data.fair_share) + " · dashed line: alarm threshold";
    figure.appendChild(caption);
    return chart;
  }

  // --- training runs: loss and accuracy per epoch ------------------------------------------------

  function lineChart(canvas, labels, series, xLabel, yLabel) {
    var options = baseOptions();
    options.scales = {
      x: { title: { display: true, text: xLabel } },
      y: { beginAtZero: true, title: { display: true, text: yLabel } },
    };
    return new Chart(canvas, {
      type: "line",
      data: {
        labels: labels,
        datasets: series.map(function (s) {
          return {
            label: s.label, data: s.data, borderColor: s.color, backgroundColor: s.color, borderDash: s.dash,
            pointStyle: s.point, pointRadius: 3.5, pointHoverRadius: 5, borderWidth: 2, tension: 0, spanGaps: false,
          };
        }),
      },
      options: options,
    });
  }

  function styled(label, key, style, values) {
    return { label: label + " (" + style.words + ")", key: key, data: values, color: style.color, dash: style.dash, point: style.point };
  }

  function trainingChart(kind) {
    return function (figure, canvas, data) {
      var xLabel = figure.getAttribute("data-x-label") || "epoch";
      if (kind === "loss") {
        return lineChart(canvas, data.epochs, [
          styled("train loss", "train_loss", STYLES[0], data.series.train_loss),
          styled("validation loss", "val_loss", STYLES[1], data.series.val_loss),
        ], xLabel, "loss");
      }
      if (kind === "accuracy") {
        return lineChart(canvas, data.epochs, [styled("validation accuracy", "val_accuracy", STYLES[0], data.series.val_accuracy)], xLabel, "accuracy");
      }
      return null;
    };
  }

  var CHARTS = { share: shareChart, loss: trainingChart("loss"), accuracy: trainingChart("accuracy") };

  function load(figure) {
    var draw = CHARTS[figure.getAttribute("data-chart")];
    var canvas = figure.querySelector("canvas");
    var fallback = figure.querySelector(".chart-fallback");
    if (!draw || !canvas) return;
    getJSON(figure.getAttribute("data-src"))
      .then(function (data) {
        if (typeof Chart === "undefined") throw new Error("the chart library did not load");
        var chart = draw(figure, canvas, data);
        if (fallback) fallback.hidden = true;
        figure.chart = chart;
        figure.setAttribute("data-ready", "true");
      })
      .catch(function (err) {
        if (fallback) fallback.textContent = "The chart could not be drawn (" + err.message + "); the table view holds the same numbers.";
        figure.setAttribute("data-ready", "error");
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof Chart !== "undefined") {
      Chart.defaults.color = MUTED;
      Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    }
    Array.prototype.forEach.call(document.querySelectorAll("figure[data-src][data-chart]"), load);
  });
})();
