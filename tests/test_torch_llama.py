"""The embedded chat model's torch-only decoding loop against transformers' own Llama on the same weights: the
prompt ids (chat template), the logits, greedy generation; the transformers fallback for other architectures;
seeded sampling; a damaged converted copy converted again."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _llm_fixtures import get_embedded

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fragrel_integrations.models.torch_llama import (  # noqa: E402
    ChatTokenizer,
    HFDecoder,
    LlamaDecoder,
    generate,
    load_decoder,
)
from fragrel_integrations.models.transformers_chat import TransformersChatModel  # noqa: E402

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "I made him know his name should be Friday. What name did I give the savage?"},
]


@pytest.fixture(scope="module")
def folder():
    return get_embedded().weights_folder


@pytest.fixture(scope="module")
def reference(folder):
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    return tok, model.eval()


def test_prompt_ids_are_the_chat_template_transformers_applies(folder, reference):
    ours = ChatTokenizer(folder)
    ref_tok, _ = reference
    for messages in (MESSAGES, MESSAGES[1:], [*MESSAGES, {"role": "assistant", "content": "Friday."}]):
        expected = ref_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        assert ours.prompt_ids(messages) == list(expected["input_ids"])
    assert ours.encode("Robinson Crusoe") == ref_tok.encode("Robinson Crusoe", add_special_tokens=False)
    assert ours.eos_ids == {ref_tok.eos_token_id}


def test_logits_match_transformers_prefill_and_cached_steps(folder, reference):
    ours = load_decoder(folder)
    assert isinstance(ours, LlamaDecoder)
    _, ref = reference
    ids = ChatTokenizer(folder).prompt_ids(MESSAGES)
    with torch.inference_mode():
        state = ours.new_state(len(ids) + 3)
        got = [ours.step(ids, state), ours.step([42], state), ours.step([7, 99], state)]
        want = [ref(torch.tensor([seq])).logits[0, -1] for seq in (ids, [*ids, 42], [*ids, 42, 7, 99])]
    for g, w in zip(got, want, strict=True):
        assert float((g - w).abs().max()) < 1e-3 * float(w.abs().max())
        assert int(g.argmax()) == int(w.argmax())
    with pytest.raises(ValueError, match="outgrows its cache"):
        ours.step([1, 2], state)


def test_greedy_generation_is_transformers_generate(folder, reference):
    tok, ref = reference
    ours = load_decoder(folder)
    ids = ChatTokenizer(folder).prompt_ids(MESSAGES)
    got = list(generate(ours, ids, budget=24, eos={tok.eos_token_id}, repeat_penalty=1.1))
    out = ref.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=24,
        do_sample=False,
        repetition_penalty=1.1,
        temperature=None,
        top_p=None,
        top_k=None,
    )[0, len(ids) :].tolist()
    assert got == [t for t in out if t != tok.eos_token_id][: len(got)]
    assert got


def test_seeded_sampling_repeats_and_leaves_the_global_rng_alone(folder):
    decoder = load_decoder(folder)
    ids = ChatTokenizer(folder).prompt_ids(MESSAGES)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    runs = [list(generate(decoder, ids, budget=12, eos=set(), temperature=1.0, seed=s)) for s in (5, 5, 6)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert torch.equal(torch.random.get_rng_state(), before)


def test_allowed_and_stop_now_limit_the_tokens(folder):
    decoder = load_decoder(folder)
    tok = ChatTokenizer(folder)
    ids = tok.prompt_ids(MESSAGES)
    only_42 = np.zeros(len(tok), dtype=bool)
    only_42[42] = True
    assert list(generate(decoder, ids, budget=5, eos=set(), allowed=lambda _: only_42)) == [42] * 5
    assert list(generate(decoder, ids, budget=5, eos=set(), stop_now=lambda out: len(out) >= 2)) != []
    assert len(list(generate(decoder, ids, budget=5, eos=set(), stop_now=lambda out: len(out) >= 2))) == 2


def test_another_architecture_runs_on_transformers_forward(tmp_path, folder):
    """A model folder that is not Llama (a tiny random GPT-2 here) gets transformers' forward and the same loop."""
    config = transformers.GPT2Config(vocab_size=49152, n_positions=256, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(folder / name, tmp_path / name)
    assert isinstance(load_decoder(tmp_path), HFDecoder)
    model = TransformersChatModel(tmp_path, context_window=256)
    reply = model.invoke(MESSAGES[1:], max_tokens=6)
    assert isinstance(reply, str) and model.loaded_from == "folder"
    assert "".join(model.stream(MESSAGES[1:], max_tokens=6)) == reply


def test_a_damaged_converted_copy_is_converted_again(tmp_path, caplog):
    converted = get_embedded().weights_folder
    copy = tmp_path / converted.name
    shutil.copytree(converted, copy)
    (copy / "model.safetensors").write_bytes((converted / "model.safetensors").read_bytes()[:1000])
    model = TransformersChatModel(cache_dir=tmp_path)
    assert model.loaded_from == "gguf" and "converting again" in caplog.text
    assert model.invoke(MESSAGES, max_tokens=8) == get_embedded().invoke(MESSAGES, max_tokens=8)
    assert TransformersChatModel(cache_dir=tmp_path).loaded_from == "cache"
