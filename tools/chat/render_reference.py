#!/usr/bin/env python3
"""Renders every chat template of tests/data/chat-templates/templates over every
conversation of tests/data/chat-templates/conversations with jinja2, the way
Hugging Face transformers' apply_chat_template does, and writes the expected
outputs (expected/) and the case list (manifest.json) the C++ test checks.

jinja2 as transformers sets it up:
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[loopcontrols]) plus the
  {% generation %} tag of AssistantTracker (renders its body);
  globals raise_exception(msg) and strftime_now(fmt);
  filter tojson = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys);
  context: messages, tools, documents, add_generation_prompt, bos_token,
  eos_token, and the conversation's other keys.
strftime_now is pinned at 2025-02-20 12:00 local time (the C++ test pins the
same clock).

Usage: python3 tools/chat/render_reference.py [DATA_DIR]
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2025, 2, 20, 12, 0, 0)

# bos/eos texts by template name prefix: those of the models' GGUFs (what
# llama.cpp passes as bos_token/eos_token). First match wins.
SPECIAL_TOKENS = [
    ("Qwen", "<|endoftext|>", "<|im_end|>"),
    ("meta-llama", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-cpp-test-Llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("NousResearch", "<|begin_of_text|>", "<|im_end|>"),
    ("fireworks", "<|begin_of_text|>", "<|eot_id|>"),
    ("meetkai", "<|begin_of_text|>", "<|eot_id|>"),
    ("deepseek-ai", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("llama-cpp-deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("google-gemma", "<bos>", "<eos>"),
    ("llama-cpp-test-google-gemma", "<bos>", "<eos>"),
    ("CohereForAI", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("llama-cpp-test-CohereForAI", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("ibm-granite", "<|end_of_text|>", "<|end_of_text|>"),
    ("microsoft-Phi", "<s>", "<|endoftext|>"),
    ("openai-gpt-oss", "<|startoftext|>", "<|return|>"),
    ("moonshotai", "[BOS]", "[EOS]"),
    ("ByteDance", "<seed:bos>", "<seed:eos>"),
    ("", "<s>", "</s>"),
]


class GenerationTag(Extension):
    """HF's AssistantTracker tag: {% generation %}...{% endgeneration %}."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class RaisedByTemplate(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(name):
    for prefix, bos, eos in SPECIAL_TOKENS:
        if name.startswith(prefix):
            return bos, eos
    raise AssertionError("unreachable")


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "chat-templates")
    env = make_env()
    templates = sorted(f[:-6] for f in os.listdir(os.path.join(data, "templates")) if f.endswith(".jinja"))
    conversations = sorted(f[:-5] for f in os.listdir(os.path.join(data, "conversations")) if f.endswith(".json"))
    out_dir = os.path.join(data, "expected")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    cases = []
    counts = {"rendered": 0, "raised": 0, "failed": 0}
    for name in templates:
        with open(os.path.join(data, "templates", name + ".jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        bos, eos = special_tokens(name)
        compiled = env.from_string(source)
        for conv_name in conversations:
            with open(os.path.join(data, "conversations", conv_name + ".json"), encoding="utf-8") as f:
                conv = json.load(f)
            # Every conversation with a generation prompt; those ending with an
            # assistant turn also without.
            variants = [True]
            if conv["messages"][-1]["role"] == "assistant":
                variants.append(False)
            for add_generation_prompt in variants:
                context = {"tools": None, "documents": None}
                context.update({k: v for k, v in conv.items() if k != "messages"})
                context.update(messages=conv["messages"], add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos)
                case = {"template": name, "conversation": conv_name, "add_generation_prompt": add_generation_prompt,
                        "bos": bos, "eos": eos}
                try:
                    text = compiled.render(**context)
                    expected = f"{name}.{conv_name}{'' if add_generation_prompt else '.nogen'}.txt"
                    with open(os.path.join(out_dir, expected), "w", encoding="utf-8", newline="") as f:
                        f.write(text)
                    case["expected"] = expected
                    counts["rendered"] += 1
                except RaisedByTemplate as e:
                    case["error"] = str(e)
                    case["raised"] = True
                    counts["raised"] += 1
                except Exception as e:  # the template fails on this input (TypeError, UndefinedError, ...)
                    case["error"] = f"{type(e).__name__}: {e}"
                    counts["failed"] += 1
                cases.append(case)
    manifest = {
        "about": "Generated by tools/chat/render_reference.py with jinja2 " + jinja2.__version__ +
                 "; do not edit. Each case: template, conversation, flags, and the expected file or the error.",
        "cases": cases,
    }
    with open(os.path.join(data, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(templates)} templates x {len(conversations)} conversations: {counts['rendered']} rendered, "
          f"{counts['raised']} raise_exception, {counts['failed']} other errors")


if __name__ == "__main__":
    main()
