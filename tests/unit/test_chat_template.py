"""Chat templates rendered and counted as transformers' ``apply_chat_template`` does.

The expected texts and counts were taken once from transformers 5.24 (``AutoTokenizer
.from_pretrained(folder).apply_chat_template(messages, add_generation_prompt=True, ...)``,
``tokenize=False`` and ``tokenize=True``) and are kept here, so that these tests need only
our code.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.engines.envs import cache_dir
from tests.engines.tiny_model import BUILD_VERSION
from tests.helpers.small_tokenizer import build_tokenizer
from tpot_locust.common.chat_template import compile_template, load_chat_template
from tpot_locust.common.tokens import Tokenizer, TokenizerError, load_tokenizer
from tpot_locust.scenario.prompts import WORDS

# A template using what transformers' environment gives: trim_blocks and lstrip_blocks,
# a namespace, loop controls, tojson (no HTML escaping, not ASCII-only), raise_exception,
# the generation tag and the special tokens (bos_token given as {"content": ...}).
TEMPLATE = """{{ bos_token }}
{% set ns = namespace(system=false) %}
{% for message in messages %}
    {% if message['role'] == 'system' %}
        {% set ns.system = true %}
[SYS] {{ message['content'] | trim }}
        {% continue %}
    {% endif %}
    {% if message['role'] not in ['user', 'assistant'] %}
        {{ raise_exception('unknown role: ' + message['role']) }}
    {% endif %}
<{{ message['role'] }}>{{ message['content'] | tojson }}{% if message['role'] == 'assistant' %}\
{% generation %}{{ eos_token }}{% endgeneration %}{% endif %}

{% endfor %}
{% if add_generation_prompt %}<assistant>{% if not ns.system %}(no system){% endif %}{% endif %}"""
ONE = [{"role": "user", "content": 'Hi <b>é</b> "q"'}]
ONE_TEXT = '<s>\n<user>"Hi <b>é</b> \\"q\\""\n<assistant>(no system)'
TURNS = [
    {"role": "system", "content": "  Be brief.  "},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi"},
    {"role": "user", "content": "Again"},
]
TURNS_TEXT = '<s>\n[SYS] Be brief.\n<user>"Hello"\n<assistant>"Hi"</s>\n<user>"Again"\n<assistant>'

# The tiny test model's own template ("role: content" lines, then "assistant:"), counted
# by transformers with its tokenizer.
TINY_CASES = [
    ([{"role": "user", "content": "Hello, world!"}], 13),
    (
        [
            {"role": "system", "content": "You are a helpful assistant, answer briefly."},
            {"role": "user", "content": "def main():\n    print('tokens per second')"},
        ],
        40,
    ),
    ([{"role": "user", "content": "a <s> b </s> c"}], 14),  # special tokens in the text
]


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def folder_with(
    tmp_path: Path, tokenizer_json: Path, config: dict | None = None, jinja: str | None = None
) -> Path:
    """A tokenizer folder: ``tokenizer.json``, and the config and template file given."""
    shutil.copy(tokenizer_json, tmp_path / "tokenizer.json")
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return tmp_path


def fresh(folder: Path) -> Tokenizer:
    """The folder's tokenizer, not one cached for another test's folder of the same path."""
    tokenizer = load_tokenizer(folder)
    return Tokenizer(tokenizer._backend, tokenizer.source)


def named_templates_config() -> dict:
    return {
        "bos_token": {"content": "<s>", "__type": "AddedToken"},
        "eos_token": "</s>",
        "chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": TEMPLATE},
        ],
    }


def test_the_default_of_named_templates_renders_as_transformers_renders_it(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    folder = folder_with(tmp_path, tokenizer_json, named_templates_config())
    tokenizer = fresh(folder)
    template = tokenizer.chat_template()
    assert template is not None
    assert template.render(ONE) == ONE_TEXT
    assert template.render(TURNS) == TURNS_TEXT
    # counted as the rendered text alone, no special tokens added
    assert tokenizer.count_chat(TURNS) == tokenizer.count(TURNS_TEXT)


def test_a_template_string_and_a_jinja_file_beside_the_tokenizer(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": "IGNORED"}
    folder = folder_with(tmp_path, tokenizer_json, config, jinja=TEMPLATE)
    tokenizer = fresh(folder)
    assert tokenizer.count_chat(ONE) == tokenizer.count(ONE_TEXT)  # the file wins
    (folder / "chat_template.jinja").unlink()
    config["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert fresh(folder).chat_template().render(TURNS) == TURNS_TEXT  # type: ignore[union-attr]


def test_a_bare_tokenizer_has_no_chat_count(tmp_path: Path, tokenizer_json: Path) -> None:
    assert fresh(folder_with(tmp_path, tokenizer_json)).count_chat(ONE) is None
    config_only = folder_with(tmp_path, tokenizer_json, {"bos_token": "<s>"})
    assert load_chat_template(config_only) is None


@pytest.mark.parametrize(
    ("config", "jinja", "message"),
    [
        (None, "{% for m in messages %}", "does not compile: TemplateSyntaxError"),
        ({"chat_template": [{"name": "rag", "template": "x"}]}, None, "none named 'default'"),
        ({"chat_template": 7}, None, "must be a string or a list"),
        (None, "{{ messages.__class__.__mro__ }}", "does not render: SecurityError"),
        (None, "{% set ns = namespace(_x=1) %}", "does not render: SecurityError"),
    ],
)
def test_a_template_that_cannot_be_used_is_a_clear_tokenizer_error(
    tmp_path: Path, tokenizer_json: Path, config: dict | None, jinja: str | None, message: str
) -> None:
    tokenizer = fresh(folder_with(tmp_path, tokenizer_json, config, jinja))
    with pytest.raises(TokenizerError, match=message):
        tokenizer.count_chat(ONE)


def test_raise_exception_in_a_template_names_its_message(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    tokenizer = fresh(folder_with(tmp_path, tokenizer_json, named_templates_config()))
    with pytest.raises(TokenizerError, match="does not render: TemplateError: unknown role: tool"):
        tokenizer.count_chat([{"role": "tool", "content": "x"}])


def test_a_template_is_compiled_once_per_text() -> None:
    assert compile_template(TEMPLATE) is compile_template(TEMPLATE)


def test_the_tiny_models_template_counts_as_transformers_counts() -> None:
    folder = cache_dir() / f"tiny-model-v{BUILD_VERSION}"
    if not (folder / "tokenizer.json").exists():
        pytest.skip(f"no tiny model at {folder} (python -m tests.engines builds it)")
    tokenizer = load_tokenizer(folder)
    for messages, expected in TINY_CASES:
        assert tokenizer.count_chat(messages) == expected


def test_the_template_tokens_and_the_messages_own_add_up_to_the_served_count() -> None:
    """What ``ChatUser.served_prompt_tokens`` sends as the prompt count, without encoding
    the whole history at each send: the messages' own tokens plus the template's."""
    folder = cache_dir() / f"tiny-model-v{BUILD_VERSION}"
    if not (folder / "tokenizer.json").exists():
        pytest.skip(f"no tiny model at {folder} (python -m tests.engines builds it)")
    tokenizer = load_tokenizer(folder)
    rng = random.Random(7)
    history: list[dict[str, str]] = []
    own = 0
    for turn in range(6):
        role = "user" if turn % 2 == 0 else "assistant"
        text = tokenizer.text_of(rng.randint(1, 200), rng, WORDS)
        history.append({"role": role, "content": text})
        own += tokenizer.count(text)
        roles = tuple(message["role"] for message in history)
        assert own + tokenizer.template_tokens(roles) == tokenizer.count_chat(history)
