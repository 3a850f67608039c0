"""The HTML both campaign pages share: escaping, the page frame (inline CSS, the index's sorting
and filtering script), tables, step-state cells, sizes and destination links. Every value
written into HTML goes through `esc`.
"""
from __future__ import annotations

import html
from typing import Any

STEP_STATES = ("completed", "blocked", "pending", "not_applicable")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)

CSS = """
:root{--fg:#1a1a1a;--muted:#4a4a4a;--line:#c8c8c8;--bg:#fff}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:1.5rem}
h1{font-size:1.4rem;margin:0 0 .5rem}h2{font-size:1.1rem;margin:1.5rem 0 .5rem}
table{border-collapse:collapse;margin:.5rem 0}caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid var(--line);padding:.25rem .4rem;vertical-align:top;text-align:left}
thead th{background:#ececec}th.step{font-size:11px;font-weight:600;max-width:6rem}
td.st{font-size:11px;max-width:7rem}
td.wide{min-width:16rem}td.dest{min-width:13rem}
.st-completed{background:#d7f0d9;color:#0b4d12}.st-blocked{background:#fbd5d5;color:#7a0b0b}
.st-pending{background:#fff1c2;color:#5c4300}.st-not_applicable{background:#eeeeee;color:#3d3d3d}
.ov-done{background:#d7f0d9;color:#0b4d12}.ov-blocked{background:#fbd5d5;color:#7a0b0b}
.ov-in_progress{background:#fff1c2;color:#5c4300}.ov-not_started,.ov-unreadable{background:#eeeeee;color:#3d3d3d}
.reason{display:block;font-size:11px;white-space:pre-wrap;max-width:22rem}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f3f3f3;padding:0 .2rem;overflow-wrap:anywhere}
a{color:#0645ad}footer{margin-top:2rem;color:var(--muted);font-size:12px}
.legend span{display:inline-block;padding:0 .4rem;margin-right:.3rem}
#controls{margin:.5rem 0}button.sort{font:inherit;background:none;border:0;padding:0;cursor:pointer;text-decoration:underline;color:inherit}
figure{margin:.5rem 0}img{max-width:100%;height:auto;border:1px solid var(--line)}
"""

SCRIPT = """
(function(){
  var table=document.getElementById('runs'); if(!table) return;
  var body=table.tBodies[0];
  var select=document.getElementById('state-filter'); var controls=document.getElementById('controls');
  controls.hidden=false;
  select.addEventListener('change',function(){
    var want=select.value;
    Array.prototype.forEach.call(body.rows,function(row){row.hidden=!!want&&row.getAttribute('data-state')!==want;});
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
})();
"""


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


def step_cell(name: str, info: dict[str, Any]) -> str:
    """One coloured cell: the status as text, the reason (or what remains) in the title and in text."""
    state = info.get("status", "pending")
    reason = info.get("reason") or ""
    if state == "pending" and not reason:
        reason = info.get("remaining") or ""
    first_line = reason.strip().splitlines()[0] if reason.strip() else ""
    title = f"{name}: {state}" + (f": {reason.strip()}" if reason.strip() else "")
    text = f"<span class=\"reason\">{esc(first_line)}</span>" if state == "blocked" and first_line else ""
    css_state = state if state in STEP_STATES else "pending"
    return (f"<td class=\"st st-{esc(css_state)}\" data-step=\"{esc(name)}\" data-status=\"{esc(state)}\" "
            f"title=\"{esc(title)}\">{esc(state.replace('_', ' '))}{text}</td>")


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
    head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [f"<th scope=\"row\">{row[0]}</th>" if first_is_header else f"<td>{row[0]}</td>"]
        cells += [f"<td>{cell}</td>" for cell in row[1:]]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f"<table><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")

