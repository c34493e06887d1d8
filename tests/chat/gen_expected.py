#!/usr/bin/env python3
"""Regenerates tests/chat/expected.json: reference renders for cases.json (real chat templates
with real conversations) and jinja_cases.json (one snippet per Jinja feature).

The expected prompts come from Python's jinja2, set up exactly as Hugging Face transformers
sets it up for apply_chat_template (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
a `tojson` filter that is json.dumps(ensure_ascii=False, indent=, separators=, sort_keys=),
`raise_exception(msg)` and `strftime_now(fmt)` globals, and the variables messages, tools
(None when absent), documents (None), add_generation_prompt, bos_token, eos_token plus extras.
Power's own renderer is never used to produce expected values.

Usage: python3 tests/chat/gen_expected.py   (needs jinja2 >= 3.1; Debian: python3-jinja2)
"""
import datetime
import json
import pathlib
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, do, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: renders its body, as transformers' AssistantTracker
    does when no assistant mask is requested."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_env(now, mutable=False):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    if mutable:
        # Power also supports list.append/pop and {% do %} (as minja does); HF's sandbox forbids
        # them, so their reference renders come from a plain jinja2 Environment.
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                                 extensions=[loopcontrols, do, Generation])
    else:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    spec = json.loads((HERE / "cases.json").read_text(encoding="utf-8"))
    results = {}
    for case in spec["cases"]:
        source = (HERE / "templates" / case["template"]).read_text(encoding="utf-8")
        now = datetime.datetime.fromisoformat(case.get("now", "2024-07-26") + "T12:00:00")
        template = make_env(now).from_string(source)
        variables = {
            "messages": spec["conversations"][case["conversation"]],
            "tools": spec["tools"] if case.get("tools") else None,
            "documents": None,
            "add_generation_prompt": case["add_generation_prompt"],
            "bos_token": case["bos_token"],
            "eos_token": case["eos_token"],
        }
        variables.update(case.get("extra_context", {}))
        try:
            results[case["name"]] = {"output": template.render(**variables)}
        except Exception as e:  # TemplateError, or TypeError etc. raised by a filter
            # raise_exception() raises a plain TemplateError: its message is the template's.
            raised = type(e) is jinja2.exceptions.TemplateError
            results[case["name"]] = {"error": str(e), "raised_by_template": raised}
    snippets = json.loads((HERE / "jinja_cases.json").read_text(encoding="utf-8"))
    jinja_results = {}
    fixed_now = datetime.datetime(2024, 7, 26, 12, 0, 0)
    for case in snippets["cases"]:
        try:
            env = make_env(fixed_now, case.get("mutable", False))
            out = env.from_string(case["template"]).render(**case["context"])
            jinja_results[case["name"]] = {"output": out}
        except Exception as e:
            jinja_results[case["name"]] = {"error": str(e)}
    doc = {
        "generator": f"Python jinja2 {jinja2.__version__} (Python {sys.version.split()[0]}) "
                     "with Hugging Face apply_chat_template settings; see gen_expected.py",
        "cases": results,
        "jinja": jinja_results,
    }
    (HERE / "expected.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                        encoding="utf-8")


if __name__ == "__main__":
    main()
