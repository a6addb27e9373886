"""The side-by-side page's CSS: one style for a laptop, a projector at
1024x768 (code, labels and heatmaps that grow with the window), a phone (one
backend at a time, picked by the switch) and print (landscape, the columns
side by side). The views' own CSS is views.STYLE."""

NARROW = "screen and (max-width: 640px)"
"""Where the page shows one backend at a time: a phone, not a printed page
(a portrait A4 is about 720 px wide) and not a projector at 150% zoom."""

STYLE = """
:root { color-scheme: light; --ink: #1d1d1f; --muted: #5f6368; --line: #d9dde3;
  --mark: #fff1a8; --ok: #137333; --bad: #b3261e; --code: 14px; }
* { box-sizing: border-box; }
html { scroll-padding-top: 8px; }
body { margin: 0 auto; max-width: 1800px; padding: 0 16px 48px; color: var(--ink);
  font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
@media screen and (min-width: 1300px) { :root { --code: 15px; } }
@media screen and (min-width: 1700px) { :root { --code: 16px; } }
h1 { font-size: 1.6em; margin: 24px 0 4px; }
h2 { font-size: 1.35em; margin: 40px 0 8px; padding-top: 8px;
  border-top: 2px solid var(--ink); }
h3 { font-size: 1.05em; margin: 0 0 4px; }
h3 a { color: inherit; text-decoration: none; }
h3 .step { color: var(--muted); font-weight: normal; }
section.chapter, .row, h2, h3 { scroll-margin-top: 12px; }
.heading { color: var(--muted); margin: 0 0 8px; }
nav ol { margin: 0; padding-left: 20px; columns: 2; }
.differences { color: var(--muted); margin: 4px 0 12px; }
.differences .style strong { color: #7a5c00; font-weight: 600; }
.intro p { max-width: 90ch; }
.cells { display: grid; grid-template-columns: repeat(var(--columns), minmax(0, 1fr));
  gap: 12px; align-items: start; }
.cell.shared { grid-column: 1 / -1; }
.cell.shared div.code { font-size: calc(var(--code) + 2px); }
.colheads { background: #fff; border-bottom: 1px solid var(--line); padding: 6px 0; }
.row { padding: 10px 0; border-bottom: 1px solid var(--line); }
.row .text { margin: 0 0 8px; max-width: 90ch; }
.cell { min-width: 0; }
.cell .label { font-weight: 600; font-size: 13px; color: var(--muted); }
.cell .label small { font-weight: normal; }
div.code { margin: 0; padding: 6px 8px; background: #f6f8fa; border-radius: 4px;
  font: var(--code)/1.5 ui-monospace, "SFMono-Regular", Menlo, Consolas,
  "DejaVu Sans Mono", monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
.arrow { white-space: nowrap; }
body:has(#fold-docs:checked) details.doc > .line { display: none; }
.fold { color: var(--muted); margin: 8px 0 0; }
details.doc > summary { display: block; cursor: pointer; list-style: none; }
details.doc > summary::-webkit-details-marker { display: none; }
details.doc > summary .line::after { content: " \\25BE"; color: #9aa0a6; }
details.doc:not([open]) > summary .line::after { content: " \\25B8 (more)"; }
.line { display: block; padding-left: 3.2em; text-indent: -3.2em; }
.ln { display: inline-block; width: 3.2em; text-indent: 0; color: #9aa0a6;
  text-decoration: none; user-select: none; }
.diff { background: var(--mark); border-radius: 2px; }
.k, .kn, .kc, .ow { color: #8250df; } .nf, .nc { color: #0550ae; }
.nb, .bp { color: #953800; } .s, .s1, .s2, .sd, .sa { color: #0a3069; }
.c, .c1 { color: #6e7781; font-style: italic; }
.mi, .mf { color: #0550ae; } .o { color: #cf222e; }
.value { margin-top: 8px; font-size: 13px; }
.shape { color: var(--muted); }
.agree.ok { color: var(--ok); } .agree.bad { color: var(--bad); font-weight: 600; }
nav.next { margin: 12px 0 0; font-weight: 600; }
.equation { margin: 6px 0 10px; padding: 0.35em 0.2em;
  font-size: min(1.2em, 1.9vw);  /* the online softmax fits at 150% zoom */
  overflow: visible; max-width: 100%; }
.equation math { math-style: normal; font-family: "STIX Two Math",
  "Latin Modern Math", "Cambria Math", "DejaVu Math TeX Gyre", math; }
/* a font with a MATH table lets brackets and braces stretch to their content */
.roles-title { margin: 8px 0 0; }
ul.roles { margin: 4px 0 8px; }
.none, .missing { color: var(--muted); font-style: italic; margin: 4px 0; }
.switch { display: none; }
@media screen and (max-width: 640px) {
  body { --columns: 1 !important; font-size: 14px; --code: 13px; }
  .equation { font-size: min(1.1em, 3.2vw); overflow: auto hidden;
    padding: 0.5em 0.2em; }  /* a phone: the longest equations scroll across */
  .switch { display: flex; gap: 4px; position: sticky; top: 0; z-index: 2;
    background: #fff; padding: 8px 0; border-bottom: 1px solid var(--line); }
  .switch input { position: absolute; opacity: 0; }
  .switch label { flex: 1; text-align: center; padding: 6px;
    border: 1px solid var(--line); border-radius: 4px; cursor: pointer; }
  .switch input:checked + label { background: var(--ink); color: #fff; }
  .colheads { display: none; }
  section.chapter, .row, h2, h3 { scroll-margin-top: 56px; }
  nav ol { columns: 1; }
}
@page { size: A4 landscape; margin: 10mm; }
@media print {
  :root { --code: 8.5px; }
  .switch, .fold { display: none; }
  body { font-size: 10.5px; max-width: none; padding: 0; }
  a { color: inherit; text-decoration: none; }
  .row h3, .equation, figure.map, .scale { break-inside: avoid; }
  h2 { break-before: page; margin-top: 0; }
  .computed .maps { grid-template-columns: repeat(4, minmax(0, 1fr)); }
  svg.heatmap { width: 100% !important; }
  .computed { padding: 4px 6px; }
  details.values { display: none; }
}
"""
"""The page's CSS (views.STYLE follows it)."""

PRESENT = """
.present-how { color: var(--muted); margin: 8px 0 0; }
.slide-count { display: none; }
body.present { max-width: none; font-size: 22px; --code: 17px; padding: 8px 24px; }
body.present header, body.present nav.next, body.present .switch,
body.present section.chapter:not(:has(.current)),
body.present section.chapter > :not(.current) { display: none; }
body.present .row.current { border: 0; padding-top: 0; }
body.present .cell .label, body.present .computed-title, body.present .agreement,
body.present .array-head, body.present figcaption { font-size: 17px; }
body.present .slide-count { display: block; color: var(--muted); font-size: 14px;
  margin: 12px 0 0; }
@media print { .present-how, .slide-count { display: none; } }
"""
"""The presentation mode's CSS: one slide (a chapter's head, a step's row, or
a block marked .slide) a screen, at a size the back of a room reads."""

SCRIPT = """
(() => {
  const body = document.body;
  const slides = () => [...document.querySelectorAll('.chapter-head, .row, .slide')];
  let at = 0;
  function show(i) {
    const all = slides();
    at = Math.max(0, Math.min(i, all.length - 1));
    all.forEach((s, j) => s.classList.toggle('current', j === at));
    document.querySelector('.slide-count').textContent =
      `${at + 1} / ${all.length}: the arrow keys move, Esc leaves`;
    window.scrollTo(0, 0);
  }
  function present(on) {
    const all = slides();
    if (on) {
      const i = all.findIndex(s => s.getBoundingClientRect().bottom > 0);
      body.classList.add('present');
      show(i < 0 ? 0 : i);
    } else {
      body.classList.remove('present');
      all.forEach(s => s.classList.remove('current'));
      all[at].scrollIntoView();
    }
  }
  document.getElementById('present').addEventListener('click', () => present(true));
  addEventListener('keydown', e => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.target.matches('input')) return;
    const on = body.classList.contains('present');
    if (e.key === 'p' || e.key === 'P') present(!on);
    else if (!on) return;
    else if (e.key === 'ArrowRight') show(at + 1);
    else if (e.key === 'ArrowLeft') show(at - 1);
    else if (e.key === 'Escape') present(false);
    else return;
    e.preventDefault();
  });
})();
"""
"""The presentation mode: P or the button enters it at the slide in view,
the right and left arrows move (up and down still scroll a tall slide), Esc
or P leaves at the last slide shown. Without it the page is whole."""
