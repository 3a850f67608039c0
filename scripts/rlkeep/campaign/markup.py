"""The HTML both campaign pages share: escaping, the page frame (inline CSS, the index's sorting
and filtering script), tables, step-state cells, sizes and destination links. Every value
written into HTML goes through `esc`.
"""
from __future__ import annotations

import html
import re
from typing import Any

from rlkeep import readable

STEP_STATES = ("completed", "blocked", "pending", "not_applicable")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)

CSS = """
:root{--fg:#1a1a1a;--muted:#4a4a4a;--line:#c8c8c8;--bg:#fff}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:1rem 1.25rem}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:1.2rem 0 .4rem}h3{font-size:1rem;margin:1rem 0 .3rem}
table{border-collapse:collapse;margin:.4rem 0}caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid var(--line);padding:.25rem .4rem;vertical-align:top;text-align:left}
thead th{background:#ececec}
.st-completed,.ov-done,.strip .c{background:#d7f0d9;color:#0b4d12}
.st-blocked,.ov-blocked,.ov-unreadable,.ov-refused,.strip .b{background:#fbd5d5;color:#7a0b0b}
.st-pending,.ov-in_progress,.strip .p{background:#fff1c2;color:#5c4300}.st-not_applicable,.ov-not_started,.strip .n{background:#eeeeee;color:#3d3d3d}
.badge{display:inline-block;padding:0 .35rem;border-radius:3px;font-weight:600;white-space:nowrap}
.reason{display:block;font-size:12px;white-space:pre-wrap}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f3f3f3;padding:0 .2rem;overflow-wrap:anywhere}
pre{background:#f3f3f3;padding:.4rem .6rem;margin:.2rem 0;font-size:12px;overflow-x:auto}
a{color:#0645ad}footer{margin-top:2rem;color:var(--muted);font-size:12px}
.sub{display:block;color:var(--muted);font-size:12px}
.vh{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.legend span{display:inline-block;padding:0 .4rem;margin-right:.3rem}
#runs{width:100%;table-layout:fixed;font-size:13px}#runs td,#runs th{overflow-wrap:anywhere}
.strip{white-space:nowrap}
.scroll{max-height:17rem;overflow:auto;border:1px solid var(--line)}.scroll table{margin:0;font-size:13px;width:100%}
.scroll thead th{position:sticky;top:0}.scroll tbody th{white-space:nowrap}
.strip i,.strip button{display:inline-block;width:13px;height:18px;font:11px/18px sans-serif;text-align:center;
border:0;padding:0;margin:0 1px 0 0;font-style:normal;vertical-align:top}
.strip button{cursor:pointer;outline-offset:1px;font-weight:700}
.tip{display:none;position:absolute;z-index:5;left:0;top:100%;width:26rem;max-width:70vw;background:#fff;color:var(--fg);
border:1px solid #7a0b0b;padding:.3rem .5rem;white-space:pre-wrap;font-size:12px;box-shadow:0 2px 6px #0003}
.cellwrap{position:relative;display:inline-block}
.cellwrap:hover .tip,.cellwrap:focus-within .tip{display:block}
.why{display:block;font-size:12px;color:#7a0b0b;margin-top:.15rem}
button.sort{font:inherit;background:none;border:0;padding:0;cursor:pointer;text-decoration:underline;color:inherit}
#controls{margin:.4rem 0;display:flex;gap:1rem;align-items:center;flex-wrap:wrap}
.banner{border:2px solid #7a0b0b;background:#fff6f6;padding:.3rem .8rem .5rem;margin:.5rem 0}
.wrap{white-space:pre-wrap;overflow-wrap:anywhere}.banner h2{margin:.2rem 0;color:#7a0b0b}.banner ul{margin:.2rem 0;padding-left:1.2rem}
.calm{border:1px solid #0b4d12;background:#f4fbf4;padding:.4rem .8rem}
.top{display:flex;gap:1.5rem;align-items:flex-start;flex-wrap:wrap}.top>section{flex:1 1 30rem;min-width:0}
svg.overlay{width:100%;max-width:640px;height:auto;font:11px sans-serif;fill:var(--fg)}
svg .frame{fill:none;stroke:#888}svg .grid{stroke:#e4e4e4}
svg .run polyline{fill:none;stroke:var(--c)}svg .run .raw{stroke-width:.6;opacity:.35}svg .run .ema{stroke-width:1.6;opacity:.85}
svg .run .sel{fill:var(--c);stroke:#fff;stroke-width:1}svg .run:hover polyline{stroke-width:3;opacity:1}
.card{border:1px solid #999;border-radius:4px;padding:.5rem 1rem;margin:.5rem 0;max-width:72rem}
.card h2{margin-top:.2rem}.card dl{display:grid;grid-template-columns:11rem 1fr;gap:.2rem 1rem;margin:.3rem 0}.card dt{font-weight:600}.card dd{margin:0}
details>summary{cursor:pointer;font-weight:600;margin:.3rem 0}
figure{margin:.5rem 0}img{max-width:100%;height:auto;border:1px solid var(--line)}
h1{overflow-wrap:anywhere}dd,.top>section{min-width:0}
@media (max-width:900px){
body{margin:.6rem}
table{display:block;max-width:100%;overflow-x:auto}
.card{padding:.4rem .6rem}.card dl{grid-template-columns:1fr;gap:0}.card dd{margin:0 0 .4rem}
.strip{white-space:normal}
#runs{display:block;overflow:visible}#runs thead{display:none}#runs tbody{display:block}
#runs tr{display:grid;grid-template-columns:minmax(0,1fr) auto;gap:.2rem .6rem;border:1px solid #999;
border-radius:4px;padding:.4rem .6rem;margin:.5rem 0}
#runs tr[hidden]{display:none}
#runs td,#runs th{display:block;border:0;padding:0;width:auto}
#runs td:nth-child(2){grid-column:2;grid-row:1;text-align:right}
#runs td:nth-child(n+3){grid-column:1/-1}
#runs td:nth-child(6),#runs td:nth-child(7),#runs td:nth-child(8),#runs td:nth-child(9){display:none}
#runs td:nth-child(4)::before{content:"selected: ";font-weight:600}
#runs td:nth-child(5)::before{content:"best reward: ";font-weight:600}
#runs td:nth-child(10)::before{content:"to do: ";font-weight:600}
#runs .sub{display:inline;margin-left:.3rem}
}
"""

SCRIPT = """
(function(){
  var table=document.getElementById('runs'); if(!table) return;
  var body=table.tBodies[0], controls=document.getElementById('controls');
  controls.hidden=false;
  var selects=Array.prototype.slice.call(controls.querySelectorAll('select[data-filter]'));
  var shown=document.getElementById('shown');
  function apply(){
    var visible={}, count=0;
    Array.prototype.forEach.call(body.rows,function(row){
      var ok=selects.every(function(s){return !s.value||row.getAttribute('data-'+s.getAttribute('data-filter'))===s.value;});
      row.hidden=!ok; if(ok){visible[row.getAttribute('data-job')]=true;count++;}
    });
    Array.prototype.forEach.call(document.querySelectorAll('#overlay g[data-job], #checkpoints tbody tr[data-job]'),
      function(el){el.style.display=visible[el.getAttribute('data-job')]?'':'none';});
    shown.textContent=count+' of '+body.rows.length+' runs shown';
  }
  // the filters live in the address too (#state=blocked&kind=rl), so a filtered view can be shared
  location.hash.slice(1).split('&').forEach(function(pair){
    var kv=pair.split('='), s=document.getElementById(decodeURIComponent(kv[0])+'-filter');
    if(s&&kv.length===2) s.value=decodeURIComponent(kv[1]);
  });
  selects.forEach(function(s){s.addEventListener('change',function(){
    apply();
    var parts=selects.filter(function(x){return x.value;}).map(function(x){
      return x.getAttribute('data-filter')+'='+encodeURIComponent(x.value);});
    history.replaceState(null,'',parts.length?'#'+parts.join('&'):location.pathname);
  });});
  var names=(table.getAttribute('data-steps')||'').split('|');
  var states={c:'completed',p:'pending',n:'not applicable'};
  body.addEventListener('mouseover',function(e){
    var cell=e.target, strip=cell.closest&&cell.closest('.strip'); if(cell.tagName!=='I'||cell.title||!strip) return;
    var index=Array.prototype.indexOf.call(strip.querySelectorAll('i,button'),cell);
    cell.title=names[index]+': '+(states[cell.className]||cell.className);
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,index){
    var button=th.querySelector('button.sort'); if(!button) return;
    button.addEventListener('click',function(){
      var ascending=th.getAttribute('aria-sort')!=='ascending';
      Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.removeAttribute('aria-sort');});
      th.setAttribute('aria-sort',ascending?'ascending':'descending');
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=a.cells[index].getAttribute('data-sort')||a.cells[index].textContent;
        var y=b.cells[index].getAttribute('data-sort')||b.cells[index].textContent;
        var nx=parseFloat(x),ny=parseFloat(y);
        var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);
        return ascending?c:-c;
      });
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
  apply();
})();
"""

# text beside every colour: a glyph per step state and per run state
STEP_GLYPHS = {"completed": "\u2713", "blocked": "\u2715", "pending": "\u2026", "not_applicable": "\u2013"}
STATE_GLYPHS = {"done": "\u2713", "blocked": "\u2715", "in_progress": "\u2026", "not_started": "\u25cb",
                "unreadable": "!", "refused": "\u2715"}


def state_badge(overall: str) -> str:
    return (f"<span class=\"badge ov-{esc(overall)}\">{STATE_GLYPHS.get(overall, '?')} "
            f"{esc(overall.replace('_', ' '))}</span>")


STEP_CLASSES = {"completed": "c", "blocked": "b", "pending": "p", "not_applicable": "n"}


def step_strip(job: str, cells: list[tuple[str, str, str]]) -> str:
    """One small cell per step, in pipeline order, a glyph beside its colour. Cells are bare `<i>` (the
    index has 300 strips; the script titles a cell with its step when pointed at); a blocked cell is a
    button whose full reason shows on focus, click or hover."""
    parts: list[str] = []
    plain: list[str] = []  # consecutive cells a screen reader skips (the summary before them says it)
    counts: dict[str, int] = {}

    def flush() -> None:
        if plain:
            parts.append(f"<span aria-hidden=\"true\">{''.join(plain)}</span>")
            plain.clear()

    for name, state, reason in cells:
        counts[state] = counts.get(state, 0) + 1
        css = state if state in STEP_STATES else "pending"
        if state == "blocked":
            flush()
            label = f"{name.replace('_', ' ')}: blocked"
            tip = f"tip-{job}-{name}"
            parts.append(f"<span class=\"cellwrap\"><button type=\"button\" class=\"b\" aria-label=\"{esc(label)}\" "
                         f"aria-describedby=\"{esc(tip)}\">{STEP_GLYPHS['blocked']}</button><span class=\"tip\" "
                         f"role=\"tooltip\" id=\"{esc(tip)}\">{esc(label)}: {esc(reason)}</span></span>")
        else:
            plain.append(f"<i class=\"{STEP_CLASSES[css]}\">{STEP_GLYPHS[css]}</i>")
    flush()
    summary = ", ".join(f"{count} {state.replace('_', ' ')}" for state, count in counts.items())
    return f"<div class=\"strip\"><span class=\"vh\">steps: {esc(summary)}</span>{''.join(parts)}</div>"


# the one part of a page that changes when nothing it shows did: when it was made (`page`)
MADE_AT = re.compile(r"<footer>Made [^ <]* by ")


def without_made_at(html: str) -> str:
    """The page less the time in its footer: what two renders of an unchanged run share."""
    return MADE_AT.sub("<footer>Made by ", html, count=1)


def page(title: str, body: str, *, generated_at: str, revision: str, script: str = "") -> str:
    scripts = f"<script>{script}</script>" if script else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"{body}<footer>Made {esc(generated_at)} by rlkeep revision <code>{esc(revision)}</code> from the local "
        "records and job folders; brought up to date at the end of every rlkeep invocation (a run's page "
        "when its run changed).</footer>"
        f"{scripts}</body></html>\n"
    )


def human_bytes(value: int | None) -> str:
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def links_html(links: list[tuple[str, str, str | None]]) -> str:
    if not links:
        return "none"
    parts = []
    for label, text, href in links:
        shown = f"<a href=\"{esc(href)}\">{esc(text)}</a>" if href else f"<code>{esc(text)}</code>"
        parts.append(f"{esc(label)}: {shown}")
    return "<br>".join(parts)


def blocked_command(status: dict[str, Any]) -> str | None:
    """The command that continues the run, when a step is blocked or pending."""
    return status.get("continue") if status.get("remaining_work") else None



def table(caption: str, headers: list[str], rows: list[list[str]], *, first_is_header: bool = True) -> str:
    """A table with real headers; `caption` only when it says more than the heading above it."""
    head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [f"<th scope=\"row\">{row[0]}</th>" if first_is_header else f"<td>{row[0]}</td>"]
        cells += [f"<td>{cell}</td>" for cell in row[1:]]
        body.append(f"<tr>{''.join(cells)}</tr>")
    caption_html = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f"<table>{caption_html}<thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


LONG_TABLE = 10  # rows; a longer table is folded away under its name and row count


def folded(name: str, rows: int, inner: str) -> str:
    """`inner` (a table of `rows` rows) under a <details> naming it and its row count when long."""
    if rows <= LONG_TABLE:
        return inner
    return f"<details><summary>{esc(name)} ({rows} rows)</summary>{inner}</details>"


def number_text(value: Any) -> str:
    return esc(readable.number(value))


def duration_text(seconds: float | None) -> str:
    return esc(readable.duration(seconds))
