#!/usr/bin/env python3
"""Reference renderer for chat templates: Python Jinja2 configured as transformers configures it.

transformers (chat_template_utils.py) renders with
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
plus a tojson filter without HTML escaping (json.dumps, ensure_ascii=False) and the globals
raise_exception and strftime_now. This script reproduces that environment (the {% generation %}
tag of AssistantTracker is emulated by a tiny extension that renders its body).

Usage:
  render_template.py TEMPLATE.jinja CONTEXT.json    print the rendering of one template
  render_template.py --batch < cases.json           cases: [{"template": str, "context": {...}}, ...]
      prints a JSON list of {"ok": true, "out": str} or {"ok": false, "type": str, "error": str}
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # the C++ tests check for this message to skip
    print("render_template.py: python3-jinja2 is not installed", file=sys.stderr)
    sys.exit(3)


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' AssistantTracker)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception() throws (a TemplateError, as in transformers); its own class only so
    that --batch can tell it from Jinja's runtime errors."""


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def render(env, template, context):
    try:
        if template not in _compiled:  # the corpus renders each real template many times
            _compiled[template] = env.from_string(template)
        return {"ok": True, "out": _compiled[template].render(**context)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"ok": False, "type": "syntax", "error": str(e)}
    except jinja2.exceptions.TemplateError as e:
        kind = "raised" if isinstance(e, RaisedByTemplate) else "render"
        return {"ok": False, "type": kind, "error": str(e)}
    except RecursionError as e:
        return {"ok": False, "type": "limit", "error": str(e)}
    except Exception as e:  # TypeError, ValueError, ... raised while rendering
        return {"ok": False, "type": "render", "error": f"{type(e).__name__}: {e}"}


def main():
    env = make_env()
    if len(sys.argv) == 2 and sys.argv[1] == "--batch":
        cases = json.load(sys.stdin)
        results = []
        for case in cases:
            results.append(render(env, case["template"], case.get("context", {})))
        json.dump(results, sys.stdout, ensure_ascii=False)
        return 0
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        template = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        context = json.load(f)
    r = render(env, template, context)
    if not r["ok"]:
        print(f"{r['type']}: {r['error']}", file=sys.stderr)
        return 1
    sys.stdout.write(r["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
