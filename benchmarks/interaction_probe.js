// Timing probe of the interaction benchmark, injected into every page before the page's own scripts
// (Playwright's add_init_script). Every time is performance.now() (ms since the navigation started).
//
// - input: when the browser dispatched the last mouseup / pointerup / wheel / dblclick (event.timeStamp,
//   captured on window before Bokeh's shadow-DOM canvases see them);
// - versions: each change of the hidden 'ecg-version' marker (it changes in the same server message as
//   every view of that selection), and `painted`, two animation frames later: every view has repainted;
// - landings: each new picture of the recording: 'raster' (the 'ecg-raster' image, its window) or
//   'samples' (the raw-sample line of a deep zoom), and when it was painted;
// - milestones of the page's opening: the marker exists, the document is idle (every Bokeh view drew
//   its first frame), the outlier table shows rows, the charts (`window.__ecgCharts`, set by the page's
//   first init script) have drawn, and `populated` (all of them) with its `populated_painted`.
(() => {
  const CHARTS = window.__ecgCharts;
  const probe = (window.__ecgProbe = { input: {}, versions: [], landings: [], milestones: {}, attached: false });
  const now = () => performance.now();
  const afterPaint = (record, key) => requestAnimationFrame(() => requestAnimationFrame(() => { record[key] = now(); }));
  const land = (record) => { probe.landings.push(record); afterPaint(record, "painted"); };

  for (const type of ["mouseup", "pointerup", "wheel", "dblclick"]) {
    window.addEventListener(type, (e) => { probe.input[type] = e.timeStamp; }, { capture: true, passive: true });
  }

  const isPlot = (model) => model.x_range !== undefined && Array.isArray(model.renderers);

  function cardView(views, name) {
    return views.query_one((v) => (v.model.css_classes || []).includes(`ecg-view-${name}`));
  }

  function firstPlotView(view) {
    if (isPlot(view.model)) return view;
    for (const child of view.children()) {
      const found = firstPlotView(child);
      if (found) return found;
    }
    return null;
  }

  // What the gestures of the harness (benchmarks/sessions.py) read: a chart's plot view, each linked
  // chart's brush bounds (its Brush, an argument of its selection callback), where values fall on a
  // chart's frame, and the times of the page's opening.
  probe.plotView = (name) => firstPlotView(cardView(Bokeh.documents[0].views_manager, name));
  probe.brushBounds = (names) => Object.fromEntries(names.map((name) => {
    const args = probe.plotView(name).model.js_event_callbacks["selectiongeometry"][0].args;
    const brush = args instanceof Map ? args.get("brush") : args.brush;
    return [name, brush.bounds == null ? null : Array.from(brush.bounds)];
  }));
  probe.geometry = (name, xs, ys) => {
    const frame = probe.plotView(name).frame, box = frame.bbox;
    return { sx: xs.map((x) => frame.x_scale.compute(x)), sy: ys.map((y) => frame.y_scale.compute(y)),
             frame: { x: box.x, y: box.y, width: box.width, height: box.height } };
  };
  probe.opening = () => {
    const nav = performance.getEntriesByType("navigation")[0] || {};
    const paint = Object.fromEntries(performance.getEntriesByType("paint").map((e) => [e.name, e.startTime]));
    return { probe_error: probe.error || null, response_start: nav.responseStart, response_end: nav.responseEnd,
             dom_content_loaded: nav.domContentLoadedEventEnd, first_paint: paint["first-paint"],
             first_contentful_paint: paint["first-contentful-paint"], ...probe.milestones };
  };

  function tableRows(views) {
    const table = views.query_one((v) => v.model.type === "DataTable");
    if (!table || !table.has_finished()) return false;
    const root = table.shadow_el || table.el;
    return root.querySelector(".slick-row") !== null;
  }

  function watchRecording(doc) {
    const raster = doc.get_model_by_name("ecg-raster");
    const figure = doc.get_model_by_name("ecg-signal");
    if (!raster || !figure) return;
    raster.properties.data.change.connect(() => {
      const d = raster.data;
      const image = d.image[0];
      const pixels = image && image.shape ? image.shape[0] * image.shape[1] : (image ? image.length : 0);
      land({ kind: pixels > 1 ? "raster" : "cleared", at: now(), painted: null, x0: d.x[0], x1: d.x[0] + d.dw[0] });
    });
    // the raw samples: one line per lead, on the same times
    const line = figure.renderers.find((r) => r.glyph && r.glyph.type === "MultiLine");
    if (!line) return;
    const samples = line.data_source;
    samples.properties.data.change.connect(() => {
      const t = samples.data.t.length ? samples.data.t[0] : [];
      if (!t || t.length === 0) return;
      land({ kind: "samples", at: now(), painted: null, x0: t[0], x1: t[t.length - 1] });
    });
  }

  function attach() {
    const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
    if (!doc) return false;
    const marker = doc.get_model_by_name("ecg-version");
    if (!marker) return false;
    probe.milestones.marker = now();
    marker.properties.text.change.connect(() => {
      const record = { version: marker.text, at: now(), painted: null };
      probe.versions.push(record);
      afterPaint(record, "painted");
    });
    watchRecording(doc);
    return true;
  }

  function opened(doc) {
    const m = probe.milestones;
    const views = doc.views_manager;
    if (!views) return false;
    if (m.idle === undefined && doc.is_idle) m.idle = now();
    if (m.table === undefined && tableRows(views)) m.table = now();
    if (m.charts === undefined) {
      const drawn = CHARTS.every((name) => {
        const card = cardView(views, name);
        const plot = card && firstPlotView(card);
        return plot && plot.has_finished();
      });
      if (drawn) m.charts = now();
    }
    return m.idle !== undefined && m.table !== undefined && m.charts !== undefined;
  }

  function tick() {
    try {
      if (!probe.attached) probe.attached = attach();
      if (probe.attached && probe.milestones.populated === undefined && opened(Bokeh.documents[0])) {
        probe.milestones.populated = now();
        afterPaint(probe.milestones, "populated_painted");
      }
    } catch (err) {
      probe.error = String(err);
    }
    if (probe.milestones.populated === undefined) requestAnimationFrame(tick);
  }
  requestAnimationFrame(tick);
})();
