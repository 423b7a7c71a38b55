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
* The page's CSS and JS are package data (``reports/views/static/report.css`` and ``report.js``),
  read when a page is built and inlined; the JS is hashed into the page's CSP.
* The page's JS (vanilla) decodes a block with ``DecompressionStream('gzip')`` only when the user
  opens that schedule/stage, and renders the IR, a unified diff or a side-by-side diff from it.
* A Content-Security-Policy meta tag forbids every fetch (``default-src 'none'``; images only from
  ``data:``), so the page is guaranteed to work offline and to load nothing.

Public API: :func:`write_page`, :func:`render_page` and :func:`render_diff_text`.
"""

from __future__ import annotations

import base64
import difflib
import functools
import gzip
import hashlib
import html
import json
import math
import os
import re
from importlib import resources
from typing import Any

from ..engine.files import atomic_write

__all__ = ["write_page", "render_page", "render_diff_text", "STAGES"]

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
            from pygments.lexers import get_lexer_by_name  # optional: highlighting
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
        from pygments.styles import get_style_by_name  # optional: highlighting (a lexer was found)
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
        from pygments.formatters import HtmlFormatter  # optional: highlighting
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
    js = static_text("report.js")
    js_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
           f"script-src 'sha256-{js_hash}'; base-uri 'none'; form-action 'none'")
    css = static_text("report.css") + _pygments_css()
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


def render_page(page: dict) -> str:
    """``page`` (see module doc) as one self-contained HTML document; the same page gives the same text."""
    return _build(page)


def write_page(page: dict, path: str) -> str:
    """Render ``page`` (see module doc) to one self-contained HTML file at ``path``, whole or not at
    all (reports.engine.files.atomic_write). Returns ``path``."""
    doc = render_page(page)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, doc)
    return path


@functools.lru_cache(maxsize=None)
def static_text(name: str) -> str:
    """A file of the page's static part (``reports/views/static``: ``report.css``, ``report.js``),
    inlined into every page as it is (the JS's hash goes into the page's CSP)."""
    return (resources.files("reports.views") / "static" / name).read_text(encoding="utf-8")
