"""One self-contained, offline HTML page for a schedlab run: provenance, notes, sortable tables,
charts, and per schedule its parameters, resources, syntax-highlighted IR at every stage and a
diff against the schedule it was derived from.

How the page stores its data
----------------------------
* Tables, charts (PNG as base64 data URIs), provenance, notes and the header of every schedule
  panel are plain, escaped HTML.
* The IR is the heavy part. For every (schedule, stage) the text is highlighted here with pygments,
  line by line (each line is a self-contained HTML fragment, so the browser can show any subset of
  lines in a diff), and stored together with the difflib opcodes of the diff against the
  ``previous`` schedule's text at the same stage as one JSON object, gzip-compressed and base64
  encoded in a ``<script type="application/octet-stream">`` block. Base64 has no ``<``, so nothing
  in the IR can end its script block.
* The page's JS (vanilla) decodes a block with ``DecompressionStream('gzip')`` only when the user
  opens that schedule/stage, and renders the IR, a unified diff or a side-by-side diff from it.
* A Content-Security-Policy meta tag forbids every fetch (``default-src 'none'``; images only from
  ``data:``), so the page is guaranteed to work offline and to load nothing.

Public API: :func:`write_page` and :func:`render_diff_text`.
"""

from __future__ import annotations

import base64
import difflib
import gzip
import hashlib
import html
import json
import math
import os
import re
import tempfile
from typing import Any

__all__ = ["write_page", "render_diff_text", "STAGES"]

STAGES = ("scheduled", "lowered", "cuda", "ptx")
_CONTEXT = 3  # lines of context around each diff hunk


# ---------------------------------------------------------------------------------------------
# terminal diff


def render_diff_text(a: str, b: str, label_a: str, label_b: str, color: bool) -> str:
    """Unified diff of ``a`` -> ``b`` for a terminal: ANSI-colored when ``color`` (red removed,
    green added, cyan hunk headers, bold file headers), plain otherwise. ``""`` when equal."""
    lines = difflib.unified_diff(_lines(a), _lines(b), fromfile=label_a, tofile=label_b,
                                 lineterm="", n=_CONTEXT)
    out = []
    for line in lines:
        if color:
            if line.startswith(("--- ", "+++ ")):
                line = f"\x1b[1m{line}\x1b[0m"
            elif line.startswith("@@"):
                line = f"\x1b[36m{line}\x1b[0m"
            elif line.startswith("-"):
                line = f"\x1b[31m{line}\x1b[0m"
            elif line.startswith("+"):
                line = f"\x1b[32m{line}\x1b[0m"
        out.append(line)
    return "\n".join(out) + "\n" if out else ""


def _lines(text: str | None) -> list[str]:
    """Text -> lines, newlines normalized, no trailing empty line (same split everywhere)."""
    if not text:
        return []
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


# ---------------------------------------------------------------------------------------------
# highlighting

_LEXER_NAMES = {"scheduled": ("python",), "lowered": ("python",), "cuda": ("cuda", "cpp"),
                "ptx": ("ptx", "gas")}
_lexer_cache: dict[str, Any] = {}
_class_cache: dict[Any, str] = {}


def _lexer(stage: str):
    if stage not in _lexer_cache:
        lexer = None
        try:
            from pygments.lexers import get_lexer_by_name
            from pygments.util import ClassNotFound
        except ImportError:  # highlighting is a nicety: plain text without pygments
            get_lexer_by_name = None
        if get_lexer_by_name is not None:
            for name in _LEXER_NAMES.get(stage, ()):
                try:
                    # stripnl/ensurenl off: the highlighted lines must match the text's lines 1:1
                    lexer = get_lexer_by_name(name, stripnl=False, stripall=False, ensurenl=False)
                    break
                except ClassNotFound:
                    continue
        _lexer_cache[stage] = lexer
    return _lexer_cache[stage]


_STYLE = "default"


def _css_class(ttype) -> str:
    """The pygments CSS class of a token type, or "" when the style gives it no look (then the
    token is plain text: fewer spans, a faster page)."""
    c = _class_cache.get(ttype)
    if c is None:
        from pygments.styles import get_style_by_name
        from pygments.token import STANDARD_TYPES, Error
        t = ttype
        while t not in STANDARD_TYPES and t.parent is not None:
            t = t.parent
        c = STANDARD_TYPES.get(t, "")
        if t in Error:  # the lexer not knowing a construct (PTX's `@%p` guards) is no error to flag
            c = ""
        if c:
            look = get_style_by_name(_STYLE).style_for_token(t)
            if not any(look.get(k) for k in ("color", "bgcolor", "bold", "italic", "underline", "border")):
                c = ""
        _class_cache[ttype] = c
    return c


def _line_safe(text: str, lexer_name: str) -> bool:
    """True when no token of this text can span lines, so every line lexes the same alone as in
    the whole text (then lines are lexed once per page and reused: successive schedules share most
    lines). Multi-line strings, block comments, continuation lines and `#if 0` make a text unsafe."""
    if re.search(r"\\$", text, re.M):
        return False
    if lexer_name == "Python":
        return '"""' not in text and "'''" not in text
    if lexer_name in ("CUDA", "C++", "C"):
        return "/*" not in text and 'R"' not in text and not re.search(r"^\s*#\s*if\s+0", text, re.M)
    if lexer_name in ("PTX", "GAS"):
        return "/*" not in text
    return False


def _join(runs) -> str:
    return "".join(f'<span class="{c}">{html.escape("".join(v), quote=False)}</span>' if c
                   else html.escape("".join(v), quote=False) for c, v in runs)


def _lex(lexer, text_lines: list[str]) -> list[str] | None:
    out: list[str] = []
    cur: list = []  # (class, [texts]) runs of the current line
    try:
        # lexed with a final newline: some rules (`//.*?\n`) need it
        for ttype, value in lexer.get_tokens("\n".join(text_lines) + "\n"):
            cls = _css_class(ttype)
            parts = value.split("\n")
            for k, part in enumerate(parts):
                if k:
                    out.append(_join(cur))
                    cur = []
                if part:
                    if cur and cur[-1][0] == cls:  # merge neighbours of one class
                        cur[-1][1].append(part)
                    else:
                        cur.append((cls, [part]))
    except Exception:  # a lexer bug must not cost the page
        return None
    if cur:
        out.append(_join(cur))
    if len(out) != len(text_lines):  # never show lines that do not match the diff
        return None
    return out


def _highlight_lines(text_lines: list[str], stage: str,
                     cache: dict | None = None) -> tuple[list[str], str]:
    """Each line as an HTML fragment (escaped; spans never cross lines); and the lexer's name.
    ``cache`` ((lexer, line) -> html) is shared by the texts of one page."""
    lexer = _lexer(stage)
    if lexer is None or not text_lines:
        return [html.escape(s, quote=False) for s in text_lines], "text"
    name = lexer.name
    if cache is not None and _line_safe("\n".join(text_lines), name):
        todo = [ln for ln in dict.fromkeys(text_lines) if (name, ln) not in cache]
        if todo:
            done = _lex(lexer, todo)
            if done is None:
                return [html.escape(s, quote=False) for s in text_lines], "text"
            cache.update(zip(((name, ln) for ln in todo), done, strict=True))
        return [cache[(name, ln)] for ln in text_lines], name
    out = _lex(lexer, text_lines)
    if out is None:
        return [html.escape(s, quote=False) for s in text_lines], "text"
    return out, name


def _pygments_css() -> str:
    try:
        from pygments.formatters import HtmlFormatter
    except ImportError:
        return ""
    return HtmlFormatter(style=_STYLE).get_style_defs(".code")


# ---------------------------------------------------------------------------------------------
# page building


def _pack(obj) -> str:
    raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _json_script(obj) -> str:
    """JSON that is safe inside <script type="application/json"> (cannot close the block)."""
    s = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fmt_num(v) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return ""
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    a = abs(v)
    if a >= 1e4:
        return f"{v:.0f}"
    if a >= 1e-3:
        return f"{v:.4g}"
    return f"{v:.3e}"


def _cell(v) -> str:
    if v is None:
        return "<td></td>"
    if _is_num(v):
        if isinstance(v, float) and math.isnan(v):
            return "<td></td>"
        return f'<td class="num" data-v="{_esc(repr(v) if isinstance(v, float) else v)}" ' \
               f'title="{_esc(v)}">{_esc(_fmt_num(v))}</td>'
    if isinstance(v, bool):
        v = str(v)
    elif not isinstance(v, str):
        v = json.dumps(v, default=str) if isinstance(v, (dict, list, tuple)) else str(v)
    return f"<td>{_esc(v)}</td>"


def _value(v) -> str:
    if isinstance(v, str):
        return _esc(v)
    if _is_num(v):
        return _esc(_fmt_num(v) if isinstance(v, float) else v)
    return _esc(json.dumps(v, default=str))


def _kv_table(title: str, d: dict | None, cls: str) -> str:
    if not d:
        return ""
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in d.items())
    return f'<table class="kv {cls}"><caption>{_esc(title)}</caption>{rows}</table>'


def _stage_order(stages: dict) -> list[str]:
    known = [s for s in STAGES if stages.get(s)]
    return known + [s for s in stages if s not in STAGES and stages.get(s)]


def _diff(a: list[str], b: list[str]) -> dict:
    sm = difflib.SequenceMatcher(None, a, b)
    added = removed = 0
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    hunks = [[list(op) for op in g] for g in sm.get_grouped_opcodes(_CONTEXT)] if added or removed else []
    return {"hunks": hunks, "added": added, "removed": removed}


def _build(page: dict) -> str:
    schedules = list(page.get("schedules") or [])
    index = {}
    for i, s in enumerate(schedules):
        index.setdefault(str(s.get("id")), i)
    text_lines = [{st: _lines(t) for st, t in (s.get("stages") or {}).items() if t} for s in schedules]

    blobs: list[str] = []
    meta_s = []
    hl_cache: dict = {}
    for i, s in enumerate(schedules):
        prev = s.get("previous")
        pi = index.get(str(prev)) if prev is not None else None
        if pi == i:
            pi = None
        stages = {}
        for st in _stage_order(s.get("stages") or {}):
            lines = text_lines[i][st]
            hl, lexer = _highlight_lines(lines, st, hl_cache)
            obj: dict[str, Any] = {"lines": hl}
            info: dict[str, Any] = {"n": len(lines), "chars": len(s["stages"][st]), "lexer": lexer}
            if pi is not None and st in text_lines[pi]:
                d = _diff(text_lines[pi][st], lines)
                obj["diff"] = d["hunks"]
                info["added"], info["removed"] = d["added"], d["removed"]
            info["blob"] = f"b{len(blobs)}"
            blobs.append(_pack(obj))
            stages[st] = info
        meta_s.append({"id": str(s.get("id")), "name": str(s.get("name", s.get("id"))),
                       "prev": pi, "stages": stages})
    meta = {"schedules": meta_s}

    title = str(page.get("title") or "schedlab report")
    prov = dict(page.get("provenance") or {})
    first = [k for k in ("gpu", "tvm", "commit", "date") if k in prov]
    prov_html = "".join(f'<div class="pv"><dt>{_esc(k)}</dt><dd>{_value(prov[k])}</dd></div>'
                        for k in first + [k for k in prov if k not in first])
    notes_html = "".join(f"<p>{_esc(n)}</p>" for n in page.get("notes") or [])

    parts: list[str] = []
    tables = page.get("tables") or []
    nav = []
    if tables:
        nav.append('<a href="#tables">tables</a>')
        parts.append('<section id="tables"><h2>Tables</h2>')
        for ti, t in enumerate(tables):
            cols = t.get("columns") or []
            rs = t.get("row_schedule") or []
            head = "".join(f'<th scope="col" data-col="{c}" aria-sort="none"><button type="button" '
                           f'class="sort">{_esc(name)}<span class="arrow" aria-hidden="true"></span>'
                           f"</button></th>" for c, name in enumerate(cols))
            body = []
            for r, row in enumerate(t.get("rows") or []):
                sid = rs[r] if r < len(rs) else None
                si = index.get(str(sid)) if sid is not None else None
                cells = "".join(_cell(v) for v in row)
                if si is not None:
                    body.append(f'<tr class="link" tabindex="0" data-s="{si}" data-o="{r}" '
                                f'title="open schedule {_esc(sid)}">{cells}</tr>')
                else:
                    body.append(f'<tr data-o="{r}">{cells}</tr>')
            parts.append(f'<div class="tw"><table class="data" id="t{ti}" data-id="{_esc(t.get("id", ti))}">'
                         f'<caption>{_esc(t.get("caption", t.get("id", "")))}</caption>'
                         f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')
        parts.append("</section>")

    charts = page.get("charts") or []
    if charts:
        nav.append('<a href="#charts">charts</a>')
        parts.append('<section id="charts"><h2>Charts</h2>')
        for c in charts:
            png = c.get("png") or b""
            if isinstance(png, str):  # tolerate an already base64-encoded PNG
                png = base64.b64decode("".join(png.split()), validate=True)
            data = base64.b64encode(bytes(png)).decode("ascii")
            cap = _esc(c.get("caption", ""))
            parts.append(f'<figure><img alt="{cap}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{cap}</figcaption></figure>")
        parts.append("</section>")

    if schedules:
        nav.append('<a href="#schedules">schedules</a>')
        parts.append('<section id="schedules"><h2>Schedules</h2>'
                     '<p class="muted">Click a schedule (or a step row in a table) to open it. '
                     'IR is decoded only when shown. <button type="button" id="collapse-all">'
                     "collapse all</button></p>")
        for i, s in enumerate(schedules):
            m = meta_s[i]
            pi = m["prev"]
            tabs = []
            for k, (st, info) in enumerate(m["stages"].items()):
                delta = ""
                if "added" in info:
                    delta = f' <span class="delta">+{info["added"]} −{info["removed"]}</span>'
                tabs.append(f'<button type="button" class="tab{" on" if k == 0 else ""}" data-stage="{_esc(st)}" '
                            f'aria-pressed="{"true" if k == 0 else "false"}" '
                            f'title="{info["n"]} lines, {info["chars"]} chars, highlighted as {_esc(info["lexer"])}">'
                            f"{_esc(st)}{delta}</button>")
            if pi is not None:
                prev_html = (f'diff against <a href="#sched-{pi}" class="prevlink" data-s="{pi}">'
                             f"{_esc(schedules[pi].get('name', schedules[pi].get('id')))}</a>")
            elif s.get("previous") is not None:
                prev_html = f'previous <code>{_esc(s.get("previous"))}</code> is not on this page'
            else:
                prev_html = "no previous schedule"
            dis = "" if pi is not None else " disabled"
            views = (f'<span class="seg"><button type="button" class="view on" data-view="ir" aria-pressed="true">IR</button>'
                     f'<button type="button" class="view" data-view="diff" aria-pressed="false"{dis}>diff</button></span>'
                     f'<span class="seg modes"><button type="button" class="mode on" data-mode="unified" aria-pressed="true" disabled>unified</button>'
                     f'<button type="button" class="mode" data-mode="split" aria-pressed="false" disabled>side by side</button></span>')
            step = s.get("step")
            parts.append(
                f'<details class="sched" id="sched-{i}" data-s="{i}" data-id="{_esc(s.get("id"))}">'
                f'<summary><span class="step">{_esc(step) if step not in (None, "") else "·"}</span> '
                f'<b class="name">{_esc(s.get("name", s.get("id")))}</b> '
                f'<span class="tag">{_esc(s.get("workload", ""))}</span> '
                f'<span class="tag">{_esc(s.get("kind", ""))}</span> '
                f'<span class="muted">{_esc(s.get("id"))}</span></summary>'
                f'<div class="body"><p class="summary">{_esc(s.get("summary", ""))}</p>'
                f'<div class="kvs">{_kv_table("parameters", s.get("params"), "params")}'
                f'{_kv_table("resources", s.get("resources"), "resources")}</div>'
                f'<p class="prev">{prev_html}</p>'
                + (f'<div class="bar"><span class="tabs">{"".join(tabs)}</span>{views}</div>'
                   f'<div class="out" aria-live="polite"></div>' if tabs else '<p class="muted">no IR stored</p>')
                + "</div></details>")
        parts.append("</section>")

    blob_html = "".join(f'<script type="application/octet-stream" id="b{k}">{b}</script>\n'
                        for k, b in enumerate(blobs))
    js = _JS
    js_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
           f"script-src 'sha256-{js_hash}'; base-uri 'none'; form-action 'none'")
    css = _CSS + _pygments_css()
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_esc(title)}</title><style>{css}</style></head><body>"
        f'<header><h1>{_esc(title)}</h1><dl class="prov">{prov_html}</dl>'
        f'<nav>{" · ".join(nav)}</nav></header>'
        f'<main><div class="notes">{notes_html}</div>{"".join(parts)}</main>'
        '<footer class="muted">tvm-schedlab · self-contained page, works offline</footer>\n'
        f'<script type="application/json" id="meta">{_json_script(meta)}</script>\n'
        f"{blob_html}<script>{js}</script></body></html>\n"
    )


def write_page(page: dict, path: str) -> str:
    """Render ``page`` (see module doc) to one self-contained HTML file at ``path``, whole or not at
    all (reports.files.atomic_write). Returns ``path``."""
    from .files import atomic_write

    doc = _build(page)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, doc)
    return path


# ---------------------------------------------------------------------------------------------
# CSS and JS (the JS is hashed into the page's CSP: keep it one static string)

_CSS = """
:root{--fg:#1d2330;--mut:#667085;--bd:#d9dee7;--bg2:#f5f7fa;--acc:#2557d6;--add:#e6ffec;--addl:#abf2bc;
--del:#ffebe9;--dell:#ffc1bd;--hunk:#ddf4ff}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);
margin:0 auto;padding:0 24px 40px;max-width:1400px}
h1{font-size:22px;margin:18px 0 6px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid var(--bd)}
.muted{color:var(--mut)}
.prov{display:flex;flex-wrap:wrap;gap:4px 18px;margin:0 0 6px}.pv{display:flex;gap:6px}
.prov dt{color:var(--mut)}.prov dd{margin:0;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
nav a{color:var(--acc)}
.notes p{margin:6px 0;max-width:100ch}
.tw{overflow-x:auto;margin:10px 0 18px}
table.data{border-collapse:collapse;font-size:13px}
table.data caption{text-align:left;font-weight:600;padding:4px 0}
table.data th,table.data td{border:1px solid var(--bd);padding:3px 8px;white-space:nowrap}
table.data th{background:var(--bg2);padding:0}
button.sort{all:unset;cursor:pointer;display:block;padding:4px 8px;font-weight:600}
button.sort:focus-visible{outline:2px solid var(--acc)}
.arrow{display:inline-block;width:1.2em;text-align:right;color:var(--acc)}
th[aria-sort=none] .arrow::after{content:"↕";color:#b8bfcc}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.link{cursor:pointer}tr.link:hover td,tr.link:focus td{background:#eef3ff}
tr.link td:first-child{color:var(--acc);text-decoration:underline dotted}
figure{margin:12px 0}figure img{max-width:100%;height:auto;border:1px solid var(--bd)}
figcaption{color:var(--mut);font-size:13px}
details.sched{border:1px solid var(--bd);border-radius:6px;margin:8px 0;background:#fff}
details.sched>summary{cursor:pointer;padding:6px 10px;background:var(--bg2);border-radius:6px}
details.sched[open]>summary{border-bottom:1px solid var(--bd);border-radius:6px 6px 0 0}
details.sched.flash{box-shadow:0 0 0 3px #8fb0ff}
.step{display:inline-block;min-width:2.2em;font-weight:600;color:var(--acc)}
.tag{font-size:12px;background:#e8ecf3;border-radius:4px;padding:0 6px;margin-left:4px}
.body{padding:8px 12px}.summary{margin:4px 0 8px;max-width:110ch}
.kvs{display:flex;flex-wrap:wrap;gap:16px}
table.kv{border-collapse:collapse;font-size:13px}table.kv caption{text-align:left;color:var(--mut)}
table.kv th{text-align:left;font-weight:500;padding:1px 12px 1px 0;color:var(--mut)}
table.kv td{font-family:ui-monospace,Menlo,Consolas,monospace;padding:1px 0}
.prev{margin:8px 0}.prev a{color:var(--acc)}
.bar{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:6px 0}
.bar button{font:inherit;font-size:13px;border:1px solid var(--bd);background:#fff;padding:2px 10px;cursor:pointer}
.bar button.on{background:var(--acc);color:#fff;border-color:var(--acc)}
.bar button:disabled{opacity:.45;cursor:default}
.tabs button,.seg button{margin-right:-1px}.tabs button:first-child,.seg button:first-child{border-radius:4px 0 0 4px}
.tabs button:last-child,.seg button:last-child{border-radius:0 4px 4px 0}
.delta{font-size:11px;opacity:.8}
.out{border:1px solid var(--bd);border-radius:4px;max-height:75vh;overflow:auto;background:#fbfcfd}
.out:empty{display:none}.out .msg{padding:8px 10px;color:var(--mut);font-size:13px}
pre.code{margin:0;padding:6px 0;font:12px/17.4px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;tab-size:4;
background:transparent}
pre.code .x-ck{content-visibility:auto}pre.code .x-l{counter-increment:ln}
pre.code .x-l::before{content:counter(ln);display:inline-block;width:6ch;padding-right:1.5ch;margin-right:1ch;
text-align:right;color:#a0a8b6;border-right:1px solid var(--bd);user-select:none}
.diffview .x-ck{content-visibility:auto}
table.diff{border-collapse:collapse;table-layout:fixed;width:100%;font:12px/17.4px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table.diff col.x-cn{width:7ch}
table.diff td{padding:0 6px;vertical-align:top}
table.diff td.x-n{text-align:right;color:#a0a8b6;user-select:none;white-space:nowrap;overflow:hidden}
table.diff td.x-c{white-space:pre-wrap;overflow-wrap:anywhere}
table.diff tr.hunk td{background:var(--hunk);color:#445;padding:2px 6px}
table.diff .add{background:var(--add)}table.diff .del{background:var(--del)}
table.diff .add td.x-n,table.diff td.add.x-n{background:var(--addl)}table.diff .del td.x-n,table.diff td.del.x-n{background:var(--dell)}
table.diff .x-s{user-select:none;color:#8a93a3}
table.diff td.empty{background:#f0f1f4}
.more{margin:6px}
footer{margin-top:30px;font-size:12px}
"""

_JS = r"""
(function () {
  "use strict";
  var META = JSON.parse(document.getElementById("meta").textContent);
  var MAX_ROWS = 20000;          // diff rows rendered before a "show all" button
  var cache = new Map();         // blob id -> Promise(decoded object)
  var state = new Map();         // schedule index -> {stage, view, mode, seq, shown}

  function decode(id) {
    if (cache.has(id)) return cache.get(id);
    var p = (async function () {
      if (typeof DecompressionStream === "undefined") throw new Error("this browser has no DecompressionStream");
      var el = document.getElementById(id);
      var bin = atob(el.textContent.trim());
      var bytes = new Uint8Array(bin.length);
      for (var k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return JSON.parse(await new Response(stream).text());
    })();
    cache.set(id, p);
    return p;
  }

  function msg(text) { var d = document.createElement("div"); d.className = "msg"; d.textContent = text; return d; }

  function stOf(i) {
    if (!state.has(i)) {
      var stages = Object.keys(META.schedules[i].stages);
      state.set(i, {stage: stages[0], view: "ir", mode: "unified", seq: 0, shown: null});
    }
    return state.get(i);
  }

  // IR as a <pre> of chunks of CHUNK lines; chunks off screen are neither laid out nor painted
  // (content-visibility), so a 10k-line stage stays smooth. Line numbers are CSS counters.
  var CHUNK = 200, LINE_PX = 17.4;
  function codeView(lines) {
    var pre = document.createElement("pre");
    pre.className = "code";
    for (var c = 0; c < lines.length; c += CHUNK) {
      var end = Math.min(lines.length, c + CHUNK), parts = [];
      for (var k = c; k < end; k++) parts.push('<span class="x-l">' + lines[k] + "\n</span>");
      var ck = document.createElement("div");
      ck.className = "x-ck";
      ck.style.counterReset = "ln " + c;
      ck.style.containIntrinsicSize = "auto " + Math.ceil((end - c) * LINE_PX) + "px";
      ck.innerHTML = parts.join("");
      pre.appendChild(ck);
    }
    return pre;
  }

  function range(a, b) { return (b - a === 1) ? String(a + 1) : (a + (b > a ? 1 : 0)) + "," + (b - a); }

  // rows of a diff: {t: "hunk"|"eq"|"del"|"add"|"rep", ...}
  function diffRows(hunks, split) {
    var rows = [];
    hunks.forEach(function (g) {
      rows.push({t: "hunk", text: "@@ -" + range(g[0][1], g[g.length - 1][2]) + " +" + range(g[0][3], g[g.length - 1][4]) + " @@"});
      g.forEach(function (op) {
        var tag = op[0], i1 = op[1], i2 = op[2], j1 = op[3], j2 = op[4], k;
        if (tag === "equal") { for (k = 0; k < i2 - i1; k++) rows.push({t: "eq", i: i1 + k, j: j1 + k}); return; }
        if (split && tag === "replace") {
          for (k = 0; k < Math.max(i2 - i1, j2 - j1); k++)
            rows.push({t: "rep", i: (i1 + k < i2) ? i1 + k : -1, j: (j1 + k < j2) ? j1 + k : -1});
          return;
        }
        for (k = i1; k < i2; k++) rows.push(split ? {t: "rep", i: k, j: -1} : {t: "del", i: k});
        for (k = j1; k < j2; k++) rows.push(split ? {t: "rep", i: -1, j: k} : {t: "add", j: k});
      });
    });
    return rows;
  }

  function rowHTML(r, a, b, split) {
    if (r.t === "hunk") return '<tr class="hunk"><td colspan="' + (split ? 4 : 3) + '">' + r.text + "</td></tr>";
    if (split) {
      if (r.t === "eq")
        return '<tr class="eq"><td class="x-n">' + (r.i + 1) + '</td><td class="x-c">' + a[r.i] + '</td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c">' + b[r.j] + "</td></tr>";
      return "<tr>" + (r.i >= 0 ? '<td class="x-n del">' + (r.i + 1) + '</td><td class="x-c del">' + a[r.i] + "</td>" : '<td class="x-n empty"></td><td class="x-c empty"></td>')
        + (r.j >= 0 ? '<td class="x-n add">' + (r.j + 1) + '</td><td class="x-c add">' + b[r.j] + "</td>" : '<td class="x-n empty"></td><td class="x-c empty"></td>') + "</tr>";
    }
    if (r.t === "eq")
      return '<tr class="eq"><td class="x-n">' + (r.i + 1) + '</td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c"><span class="x-s"> </span>' + a[r.i] + "</td></tr>";
    if (r.t === "del")
      return '<tr class="del"><td class="x-n">' + (r.i + 1) + '</td><td class="x-n"></td><td class="x-c"><span class="x-s">-</span>' + a[r.i] + "</td></tr>";
    return '<tr class="add"><td class="x-n"></td><td class="x-n">' + (r.j + 1) + '</td><td class="x-c"><span class="x-s">+</span>' + b[r.j] + "</td></tr>";
  }

  // a diff as chunks of CHUNK rows, each its own fixed-layout table (same columns), so that
  // chunks off screen are skipped by layout (content-visibility) and big diffs stay fast
  function diffView(hunks, a, b, split) {
    var wrap = document.createElement("div");
    wrap.className = "diffview code " + (split ? "split" : "unified");  // .code: the pygments colors
    if (!hunks || hunks.length === 0) { wrap.appendChild(msg("no changes at this stage")); return wrap; }
    var rows = diffRows(hunks, split);
    var cols = split ? '<col class="x-cn"><col><col class="x-cn"><col>' : '<col class="x-cn"><col class="x-cn"><col>';
    var body = document.createElement("div");
    var draw = function (from, to) {
      for (var c = from; c < to; c += CHUNK) {
        var end = Math.min(to, c + CHUNK), h = [];
        for (var x = c; x < end; x++) h.push(rowHTML(rows[x], a, b, split));
        var ck = document.createElement("div");
        ck.className = "x-ck";
        ck.style.containIntrinsicSize = "auto " + Math.ceil((end - c) * LINE_PX) + "px";
        ck.innerHTML = '<table class="diff ' + (split ? "split" : "unified") + '"><colgroup>' + cols + "</colgroup><tbody>" + h.join("") + "</tbody></table>";
        body.appendChild(ck);
      }
    };
    draw(0, Math.min(rows.length, MAX_ROWS));
    wrap.appendChild(body);
    if (rows.length > MAX_ROWS) {
      var more = document.createElement("button");
      more.type = "button"; more.className = "more";
      more.textContent = "show all " + rows.length + " diff rows (" + (rows.length - MAX_ROWS) + " more)";
      more.addEventListener("click", function () { draw(MAX_ROWS, rows.length); more.remove(); });
      wrap.appendChild(more);
    }
    return wrap;
  }

  async function render(panel) {
    var i = +panel.dataset.s, s = META.schedules[i], st = stOf(i);
    var out = panel.querySelector(".out");
    if (!out || !st.stage) return;
    var key = st.stage + "|" + st.view + "|" + st.mode;
    if (st.shown === key) return;
    st.shown = key;
    var seq = ++st.seq;
    out.replaceChildren(msg("decoding " + st.stage + " …"));
    try {
      var info = s.stages[st.stage];
      var cur = await decode(info.blob);
      var node;
      if (st.view === "diff") {
        var prev = s.prev === null ? null : META.schedules[s.prev];
        if (!prev) node = msg("no previous schedule to diff against");
        else if (!prev.stages[st.stage]) node = msg(prev.name + " has no " + st.stage + " stage");
        else {
          var old = await decode(prev.stages[st.stage].blob);
          node = diffView(cur.diff, old.lines, cur.lines, st.mode === "split");
          node.prepend(msg("diff " + prev.name + " → " + s.name + " at stage " + st.stage + ": +" + info.added + " −" + info.removed + " lines"));
        }
      } else {
        node = codeView(cur.lines);
      }
      if (seq === st.seq) { out.replaceChildren(node); panel.dataset.rendered = key; }
    } catch (e) {
      if (seq === st.seq) { st.shown = null; out.replaceChildren(msg("could not show this stage: " + e.message)); }
    }
  }

  function setPressed(buttons, pred) {
    buttons.forEach(function (b) { var on = pred(b); b.classList.toggle("on", on); b.setAttribute("aria-pressed", on ? "true" : "false"); });
  }

  function syncBar(panel) {
    var st = stOf(+panel.dataset.s);
    setPressed(panel.querySelectorAll("button.tab"), function (b) { return b.dataset.stage === st.stage; });
    setPressed(panel.querySelectorAll("button.view"), function (b) { return b.dataset.view === st.view; });
    var modes = panel.querySelectorAll("button.mode");
    setPressed(modes, function (b) { return b.dataset.mode === st.mode; });
    modes.forEach(function (b) { b.disabled = st.view !== "diff"; });
  }

  function openSchedule(i) {
    var panel = document.getElementById("sched-" + i);
    if (!panel) return;
    panel.open = true;
    panel.scrollIntoView({block: "start"});
    // once the IR is in, the page may have grown: scroll again so the panel is at the top
    render(panel).then(function () { panel.scrollIntoView({block: "start"}); });
    panel.classList.add("flash");
    setTimeout(function () { panel.classList.remove("flash"); }, 1200);
  }

  document.querySelectorAll("details.sched").forEach(function (panel) {
    panel.addEventListener("toggle", function () { if (panel.open) render(panel); });
    panel.addEventListener("click", function (ev) {
      var b = ev.target.closest("button");
      var st = stOf(+panel.dataset.s);
      if (b && !b.disabled) {
        if (b.classList.contains("tab")) st.stage = b.dataset.stage;
        else if (b.classList.contains("view")) st.view = b.dataset.view;
        else if (b.classList.contains("mode")) st.mode = b.dataset.mode;
        else return;
        syncBar(panel);
        render(panel);
        return;
      }
      var a = ev.target.closest("a.prevlink");
      if (a) { ev.preventDefault(); openSchedule(+a.dataset.s); }
    });
  });

  var collapse = document.getElementById("collapse-all");
  if (collapse) collapse.addEventListener("click", function () {
    document.querySelectorAll("details.sched[open]").forEach(function (d) { d.open = false; });
  });

  // ---- tables: step rows open schedules; headers sort
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function cellKey(row, col) {
    var c = row.cells[col];
    if (!c) return {k: 2};
    var raw = c.hasAttribute("data-v") ? c.getAttribute("data-v") : c.textContent.trim();
    if (raw === "") return {k: 2};
    var n = Number(raw);
    if (!Number.isNaN(n)) return {k: 0, v: n};
    return {k: 1, v: raw};
  }

  function sortBy(table, th) {
    var col = +th.dataset.col;
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    table.querySelectorAll("thead th").forEach(function (h) {
      h.setAttribute("aria-sort", "none");
      h.querySelector(".arrow").textContent = "";
    });
    th.setAttribute("aria-sort", dir);
    th.querySelector(".arrow").textContent = dir === "ascending" ? "▲" : "▼";
    var sign = dir === "ascending" ? 1 : -1;
    var tbody = table.tBodies[0];
    var rows = Array.from(tbody.rows).map(function (r) { return {r: r, key: cellKey(r, col), o: +r.dataset.o}; });
    rows.sort(function (x, y) {
      var a = x.key, b = y.key, c;
      if (a.k === 2 || b.k === 2) c = (a.k === 2 ? 1 : 0) - (b.k === 2 ? 1 : 0);   // blanks last, both ways
      else {
        if (a.k !== b.k) c = a.k - b.k;
        else if (a.k === 0) c = a.v < b.v ? -1 : a.v > b.v ? 1 : 0;
        else c = collator.compare(a.v, b.v);
        c *= sign;
      }
      return c || (x.o - y.o);
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (x) { frag.appendChild(x.r); });
    tbody.appendChild(frag);
  }

  document.querySelectorAll("table.data").forEach(function (table) {
    table.tHead.addEventListener("click", function (ev) {
      var th = ev.target.closest("th");
      if (th) sortBy(table, th);
    });
    table.tBodies[0].addEventListener("click", function (ev) {
      var tr = ev.target.closest("tr.link");
      if (tr) openSchedule(+tr.dataset.s);
    });
    table.tBodies[0].addEventListener("keydown", function (ev) {
      var tr = ev.target.closest("tr.link");
      if (tr && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); openSchedule(+tr.dataset.s); }
    });
  });

  function fromHash() {
    var m = /^#sched-(\d+)$/.exec(location.hash);
    if (m) openSchedule(+m[1]);
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
"""
