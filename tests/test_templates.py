"""Chat templates: the real ones of the common model families render as transformers renders
them; template bombs are refused before memory grows.

The templates are the models' own (tests/data/chat_templates/, each with where it came from).
Their expected renderings were made by transformers' ``apply_chat_template`` environment, so
the comparison is with the reference renderer, character for character; the shape checks say
what each family's prompt looks like (the user's message once, the generation prompt last).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from as2d.runtime.llm.template import MAX_CHARS, TemplateError, render_chat_template

DATA = Path(__file__).parent / "data" / "chat_templates"
INDEX = json.loads((DATA / "templates.json").read_text(encoding="utf-8"))["templates"]

_TOOLS = [{"type": "function", "function": {
    "name": "get_time", "description": "The time at a place.",
    "parameters": {"type": "object", "properties": {
        "place": {"type": "string", "description": "A city, e.g. Paris"}},
        "required": ["place"]}}}]
CONVERSATIONS = {
    "user": {"messages": [{"role": "user", "content": "Who wrote Sense and Sensibility?"}]},
    "chat": {"messages": [{"role": "system", "content": "Answer briefly."},
                          {"role": "user", "content": "Who wrote Sense and Sensibility?"},
                          {"role": "assistant", "content": "Jane Austen."},
                          {"role": "user", "content": "When?"}]},
    "tools": {"messages": [{"role": "user", "content": "What time is it in Paris?"}],
              "tools": _TOOLS},
}

# What each family's prompt ends with when the model is to answer.
GENERATION_PROMPT = {
    "Llama 3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "Llama 3.1": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "Llama 3.2": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "Qwen2.5": "<|im_start|>assistant\n",
    "Qwen3": "<|im_start|>assistant\n",
    "SmolLM2": "<|im_start|>assistant\n",
    "Phi-3": "<|assistant|>\n",
    "Phi-3.5": "<|assistant|>\n",
    "Phi-4": "<|assistant|>",
    "Gemma (1 and 2)": "<start_of_turn>model\n",
    "Gemma 3": "<start_of_turn>model\n",
    "Mistral": "[/INST]",
    "DeepSeek-R1": "<｜Assistant｜><think>\n",
    "Granite 3": "<|start_of_role|>assistant<|end_of_role|>",
    "Command R": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>",
    "Falcon 3": "<|assistant|>\n",
}


def _render(name: str, add_generation_prompt: bool = True, **conversation) -> str:
    entry = INDEX[name]
    return render_chat_template((DATA / f"{name}.jinja").read_text(encoding="utf-8"),
                                add_generation_prompt=add_generation_prompt,
                                bos_token=entry["bos_token"], eos_token=entry["eos_token"],
                                **conversation)


def test_the_set_covers_the_common_families():
    families = {e["family"] for e in INDEX.values()}
    for family in ("Llama 3", "Qwen2.5", "Qwen3", "Phi-3", "Gemma 3", "SmolLM2", "Mistral"):
        assert family in families
    for name, entry in INDEX.items():
        assert (DATA / f"{name}.jinja").is_file()
        assert entry["source"] and entry["model"]
        assert entry["family"] in GENERATION_PROMPT


# The day transformers rendered the expected texts: Granite's template dates its system turn
# with ``strftime_now`` whatever ``date_string`` says, so the renderer's clock is set to it.
RENDERED_ON = datetime(2026, 12, 2, 12, 0)


class _RenderDay(datetime):
    @classmethod
    def now(cls, tz=None):
        return RENDERED_ON


@pytest.mark.parametrize("case", list(CONVERSATIONS))
@pytest.mark.parametrize("name", list(INDEX))
def test_real_templates_render_as_transformers_does(name, case, monkeypatch):
    import as2d.runtime.llm.template as template

    monkeypatch.setattr(template, "datetime", _RenderDay)
    expected = INDEX[name]["expected"][case]
    conversation = dict(CONVERSATIONS[case], date_string="26 Jul 2024")
    if expected.startswith("ERROR "):  # the template's own raise_exception
        with pytest.raises(TemplateError) as exc:
            _render(name, **conversation)
        assert expected.split(": ", 1)[1] in str(exc.value)
        assert "refuses the conversation" in str(exc.value)
    else:
        assert _render(name, **conversation) == expected


@pytest.mark.parametrize("name", list(INDEX))
def test_a_user_message_and_the_generation_prompt_have_the_familys_shape(name):
    """The shape as2d relies on (runtime/ask/prompt.py): the message appears once, verbatim,
    and the prompt ends with the family's turn for the model; without the generation prompt
    that turn is not there (Mistral's templates always end a user turn with [/INST])."""
    family = INDEX[name]["family"]
    message = "\x00Q\x00 What did \"Elinor\" say? <b>&</b>"
    out = _render(name, messages=[{"role": "user", "content": message}])
    assert out.count(message) == 1
    assert out.endswith(GENERATION_PROMPT[family]), out[-80:]
    head = out[:out.index(message)]
    assert GENERATION_PROMPT[family] not in head or family == "Mistral"
    bare = _render(name, add_generation_prompt=False,
                   messages=[{"role": "user", "content": message}])
    if family != "Mistral":
        assert not bare.endswith(GENERATION_PROMPT[family])
    assert bare.count(message) == 1


@pytest.mark.parametrize("name", ["llama-3.2", "granite-3.2"])
def test_templates_that_date_the_prompt_get_todays_date(name):
    """Llama 3.2 and Granite call ``strftime_now`` when no ``date_string`` is given."""
    fmt = {"llama-3.2": "%d %b %Y", "granite-3.2": "%B %d, %Y"}[name]
    before = datetime.now().strftime(fmt)
    out = _render(name, **CONVERSATIONS["user"])
    after = datetime.now().strftime(fmt)
    assert before in out or after in out


def test_transformers_extras_and_jinja_filters_that_take_the_environment():
    """The two forms the issue saw fail, and transformers' extra names and options."""
    messages = [{"role": "system", "content": "<Be> & brief"}, {"role": "user", "content": "hi"}]
    r = render_chat_template
    assert r("{% for m in messages %}{{ m | tojson }}\n{% endfor %}", messages=messages) == (
        '{"role": "system", "content": "<Be> & brief"}\n{"role": "user", "content": "hi"}\n')
    assert r("{{ messages | map(attribute='role') | join(', ') }}", messages=messages) == \
        "system, user"
    assert r("{{ {'b': 'é', 'a': [1]} | tojson(indent=2, sort_keys=true) }}") == \
        '{\n  "a": [\n    1\n  ],\n  "b": "é"\n}'
    assert r("{{ {'b': 'é'} | tojson(ensure_ascii=true, separators=(',', ':')) }}") == \
        '{"b":"\\u00e9"}'
    assert r("{% for i in range(9) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 3 %}"
             "{% break %}{% endif %}{{ i }}{% endfor %}") == "013"
    assert r("{% generation %}kept{% endgeneration %}") == "kept"
    assert r("{{ dict(a=1, b=2) | dictsort | map('first') | join }}") == "ab"
    assert r("{{ strftime_now('%Y') }}") == datetime.now().strftime("%Y")
    assert r("{{ tools is none and documents is none }}") == "True"
    assert r("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
             "{% endfor %}{{ ns.n }}", messages=messages) == "2"
    assert r("  {%- if true %}\n  x\n{% endif %}") == "  x\n"  # trim and lstrip blocks
    with pytest.raises(TemplateError, match="unsafe"):
        r("{% set ns = namespace(_x=1) %}")
    with pytest.raises(TemplateError, match="refuses the conversation: no tools"):
        r("{{ raise_exception('no tools') }}")


def test_a_long_message_within_the_bound_still_renders():
    content = "word " * (MAX_CHARS // 10)
    out = render_chat_template("{% for m in messages %}{{ m.content | trim | tojson }}"
                               "{{ m.content.replace('word', 'w') | length }}{% endfor %}",
                               messages=[{"role": "user", "content": content}])
    assert out.startswith('"word word')
    assert out.endswith(str(len(content) - 3 * content.count("word")))


_S = "{% set s = 'x' * 99999 %}"
BOMBS = {
    "doubling ~": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "doubling replace in macro": "{% macro f(s, n) %}{% if n %}{{ f(s|replace('x', 'xx'), n - 1) }}"
                                 "{% else %}{{ s }}{% endif %}{% endmacro %}{{ f('x', 64) }}",
    "indent": "{{ ('x\n' * 50000)|indent(99999) }}",
    "indent nested": "{% macro f(s, n) %}{% if n %}{{ f(s|indent(99, true), n - 1) }}{% else %}"
                     "{{ s }}{% endif %}{% endmacro %}{{ f('x\n' * 40000, 64) }}",
    "list printed": _S + "{{ [s] * 100000 }}",
    "percent": _S + "{{ '%s' * 30000 % ((s,) * 30000) }}",
    "format": _S + "{{ ('{0}' * 30000).format(s) }}",
    "format nested width": "{{ ('{0:{1}}' * 10000).format('x', 99999) }}",
    "center in replace": "{{ ('x'|center(99999))|replace('x', 'x'|center(99999)) }}",
    "expandtabs": "{{ ('\t' * 99999).expandtabs(99999) }}",
    "join separator": "{{ (range(99999)|list)|join('x' * 99999) }}",
    "tojson deep indent": "{% set ns = namespace(l=[]) %}{% for i in range(900) %}"
                          "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson(indent=32) }}",
    "tojson huge indent": "{{ [[[[1]]]]|tojson(indent=99999) }}",
    "macro buffer": _S + "{% macro f() %}{% for i in range(99999) %}{{ s }}{% endfor %}"
                         "{% endmacro %}{{ f() }}",
    "set block": _S + "{% set x %}{% for i in range(99999) %}{{ s }}{% endfor %}{% endset %}"
                      "{{ x|length }}",
    "filter block": _S + "{% filter upper %}{% for i in range(99999) %}{{ s }}{% endfor %}"
                         "{% endfilter %}",
    "call block": _S + "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}"
                       "{% for i in range(99999) %}{{ s }}{% endfor %}{% endcall %}",
    "block called": _S + "{% if false %}{% block b %}{% for i in range(99999) %}{{ s }}"
                         "{% endfor %}{% endblock %}{% endif %}{{ self.b()|length }}",
    "many made strings": "{{ range(99999)|map('center', 99999)|list|length }}",
    "recursion keeps copies": "{% macro f(s, n) %}{% if n < 5000 %}{{ f(s[1:] ~ 'y', n + 1) }}"
                              "{% endif %}{% endmacro %}{{ f('x' * 99999, 0) }}",
    "lipsum": "{{ lipsum(99999) }}",
    "wordwrap": "{{ ('x ' * 50000)|wordwrap(1, true, 'y' * 99999) }}",
    "translate": "{{ ('x' * 99999).translate({120: 'y' * 99999}) }}",
    "squaring": "{% set ns = namespace(n=3) %}{% for i in range(64) %}"
                "{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}",
    "sum of lists": "{{ ([[1] * 99999] * 99999)|sum(start=[])|length }}",
    "batch printed": _S + "{{ [s]|batch(99999, s)|list }}",
    "strftime_now": "{{ strftime_now('%c' * 50000) }}",
    "string filter": _S + "{{ ([s] * 99999)|string|length }}",
    "pprint": _S + "{{ ([s] * 99999)|pprint|length }}",
    "tojson of a list": _S + "{{ ([s] * 99999)|tojson|length }}",
    "~ of a list": _S + "{{ ([s] * 99999) ~ '' }}",
    "dict items": _S + "{{ (dict(a=[s] * 99999)|items|list) ~ '' }}",
}

_MEASURE = r"""
import json, resource, sys
from as2d.runtime.llm.template import TemplateError, render_chat_template
bombs = json.loads(sys.stdin.read())
messages = [{"role": "user", "content": "hi"}]
render_chat_template("{{ messages|tojson }}{{ messages|map(attribute='role')|join }}",
                     messages=messages)  # warm: jinja's modules imported, caches filled
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ends = {}
for name, source in bombs.items():
    try:
        out = render_chat_template(source, messages=messages, add_generation_prompt=True)
        ends[name] = "rendered %d characters" % len(out)
    except TemplateError as exc:
        ends[name] = "TemplateError: " + str(exc)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ends": ends, "growth_kb": peak - start}))
"""


def test_template_bombs_are_refused_before_memory_grows():
    """Each bomb, doubled, indented, repeated or kept alive into gigabytes, ends in one
    TemplateError, and the process's peak RSS (getrusage, in a fresh interpreter that has
    rendered a real template first) grows by less than 64 MB over all of them. Before the
    bounds grew with the value, the same bombs took 2.9 GB (and hit a 3 GB cap)."""
    p = subprocess.run([sys.executable, "-c", _MEASURE], input=json.dumps(BOMBS),
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONHASHSEED="0"))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    for name, end in report["ends"].items():
        assert end.startswith("TemplateError: the chat template "), (name, end)
        assert "\n" not in end
    assert report["growth_kb"] < 64 * 1024, report
