// Costs of BokehJS 3.6 that every brush paid in the browser, removed for the dashboard's pages.
// Loaded right after BokehJS (dashboard/app.py: `speedups_script`). The stack is pinned to Bokeh
// 3.6 by cuxfilter 26.06. On the 2-core CPU, in Chromium, the first two together took a brush from
// mouse-up to every view repainted from ~90 to ~66 ms (median; README, "The dashboard").
//
// 1. After each patch from the server, BokehJS 3.6 re-walks every model of the document to
//    rebuild its index of models (Document._recompute_all_models: ~14 ms per brush with ~400
//    models), even when the patch only replaced data columns (bokeh/bokeh#13119, changed upstream
//    after 3.6 by bokeh/bokeh#14295). Here the walk is skipped when the patch brought no new model,
//    changed no reference between models and added or removed no root: then the index is unchanged.
// 2. Every paint looks each visual property of axes, grids, labels and annotations (colour, alpha,
//    width, font…) up as a CSS variable `--bk-<name>` through getComputedStyle before it uses the
//    model's value: ~2,500 lookups per brush, ~17 ms. Neither the dashboard nor Panel, Bokeh or
//    cuxfilter define such variables (tests/test_browser.py checks the page), so every lookup found
//    nothing; it now returns nothing at once and the models' own values apply as before.
// 3. What a brush changes is drawn at the "overlay" level (dashboard/charts.py), so that BokehJS
//    repaints only a plot's overlay canvas, not its axes, grid and other glyphs. BokehJS clips the
//    glyphs of the lower levels to the plot's frame but not those of the overlay level (it expects
//    tools' boxes there): here glyph renderers clip to the frame at every level, so that a plane's
//    image stays inside its axes while a pan waits for the re-binned one. (Four interleaved runs of
//    120 brushes on two cores: median 88-99 ms against 111-120 ms with every plot repainted whole.)
//
// `window.ecgBokehSpeedups` keeps the originals and counts the skipped walks, for the tests; on a
// BokehJS other than 3.6 nothing is patched and it says which version was skipped.
(() => {
  if (window.ecgBokehSpeedups || typeof Bokeh === "undefined") {
    return;
  }
  // These patch BokehJS 3.6's internals: on any other version they stay off, and say so.
  if (!String(Bokeh.version).startsWith("3.6.")) {
    console.error(`bokeh_speedups.js is written for BokehJS 3.6 and is not applied to ${Bokeh.version}`);
    window.ecgBokehSpeedups = {skipped: Bokeh.version};
    return;
  }
  const {Document} = Bokeh.require("document/document");
  const {HasProps} = Bokeh.require("core/has_props");
  const {VisualProperties} = Bokeh.require("core/visuals/visual");
  const {GlyphRendererView} = Bokeh.require("models/renderers/glyph_renderer");
  const doc = Document.prototype;
  const original = {
    apply_json_patch: doc.apply_json_patch,
    invalidate_all_models: doc._invalidate_all_models,
    pop_all_models_freeze: doc._pop_all_models_freeze,
    attach_document: HasProps.prototype.attach_document,
    get_css_value: VisualProperties.prototype._get_css_value,
  };
  const speedups = (window.ecgBokehSpeedups = {original, skipped_walks: 0});

  // A patch leaves the index stale if it adds or removes a root, if a property now refers to other
  // models than before (BokehJS then calls _invalidate_all_models, a no-op while the patch is
  // applied) or if a model is new (the deserializer attaches every new model to the document).
  doc.apply_json_patch = function (patch, buffers) {
    this._ecg_stale = patch.events.some((event) => event.kind === "RootAdded" || event.kind === "RootRemoved");
    this._ecg_patching = true;
    try {
      return original.apply_json_patch.call(this, patch, buffers);
    } finally {
      this._ecg_patching = false;
    }
  };
  doc._invalidate_all_models = function () {
    this._ecg_stale = true;
    return original.invalidate_all_models.call(this);
  };
  HasProps.prototype.attach_document = function (document) {
    document._ecg_stale = true;
    return original.attach_document.call(this, document);
  };
  doc._pop_all_models_freeze = function () {
    if (this._ecg_patching && this._all_models_freeze_count === 1 && !this._ecg_stale) {
      this._all_models_freeze_count = 0;
      speedups.skipped_walks += 1;
      return;
    }
    return original.pop_all_models_freeze.call(this);
  };

  VisualProperties.prototype._get_css_value = function () {
    return "";
  };

  Object.defineProperty(GlyphRendererView.prototype, "needs_clip", {get: () => true, configurable: true});
})();
