"""The embedded chat model on PyTorch alone: a folder's tokenizer and chat template, a Llama forward pass (other
architectures: transformers', :class:`HFDecoder`) and one generation loop yielding token ids."""

from __future__ import annotations

import contextlib
import inspect
import json
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

__all__ = ["ChatTokenizer", "HFDecoder", "LlamaDecoder", "generate", "load_decoder"]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class ChatTokenizer:
    """A model folder's ``tokenizer.json`` and chat template; end ids from ``generation_config.json`` and EOS."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = _read_json(folder / "tokenizer_config.json")
        template_file = folder / "chat_template.jinja"
        self.chat_template: str | None = (
            template_file.read_text(encoding="utf-8") if template_file.is_file() else config.get("chat_template")
        )
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.special_ids = frozenset(i for i, t in self._tok.get_added_tokens_decoder().items() if t.special)
        eos = _read_json(folder / "generation_config.json").get("eos_token_id")
        ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
        own = None if self.eos_token is None else self._tok.token_to_id(self.eos_token)
        self.eos_ids = frozenset(int(i) for i in [*ids, own] if i is not None)
        self._template: Any = None

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids of ``text`` (``special``: with BOS/EOS)."""
        return list(self._tok.encode(text, add_special_tokens=special).ids) if text else []

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special))

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt ids of a chat request (without a template: ``role: content`` lines and ``assistant:``)."""
        if not self.chat_template:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
            return self.encode(text, special=True)
        if self._template is None:
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.globals["raise_exception"] = _raise_template_error
            self._template = env.from_string(self.chat_template)
        special = {"bos_token": self.bos_token or "", "eos_token": self.eos_token or ""}
        text = self._template.render(messages=messages, add_generation_prompt=True, **special)
        return self.encode(text)


def _raise_template_error(message: str) -> None:
    raise ValueError(f"the model's chat template refused the messages: {message}")


class LlamaDecoder:
    """The float32 forward pass of a Llama checkpoint (one ``model.safetensors``), with a key/value cache."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        import torch
        from safetensors.torch import load_file

        self.torch = torch
        self.config = config
        self.w = {name: t.float() for name, t in load_file(str(folder / "model.safetensors")).items()}
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(config.get("num_key_value_heads") or self.heads)
        self.head_dim = int(config.get("head_dim") or config["hidden_size"] // self.heads)
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.layers = int(config["num_hidden_layers"])
        theta = float((config.get("rope_parameters") or {}).get("rope_theta") or config.get("rope_theta") or 1e4)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        self.embed = self.w.get("model.embed_tokens.weight", self.w.get("lm_head.weight"))
        if self.embed is None:
            raise ValueError(f"{folder / 'model.safetensors'} holds no token embeddings")
        self.lm_head = self.w.get("lm_head.weight", self.embed)
        self.vocab_size = int(self.lm_head.shape[0])

    @staticmethod
    def supports(config: dict[str, Any]) -> bool:
        """Whether this forward pass computes ``config``'s architecture exactly."""
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        return (
            config.get("model_type") == "llama"
            and config.get("hidden_act", "silu") == "silu"
            and rope.get("rope_type", rope.get("type", "default")) == "default"
            and not config.get("mlp_bias")
        )

    def new_state(self, length: int) -> dict[str, Any]:
        shape = (self.layers, 1, self.kv_heads, length, self.head_dim)
        return {"k": self.torch.empty(shape), "v": self.torch.empty(shape), "used": 0}

    def _rms(self, x: Any, name: str) -> Any:
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w[name]

    def step(self, ids: Sequence[int], state: dict[str, Any]) -> Any:
        """The logits after ``ids``, which continue the sequence ``state`` caches."""
        torch, w = self.torch, self.w
        f = torch.nn.functional
        start, n = state["used"], len(ids)
        if start + n > state["k"].shape[3]:
            raise ValueError(f"the sequence outgrows its cache ({start + n} > {state['k'].shape[3]} positions)")
        freqs = torch.outer(torch.arange(start, start + n, dtype=torch.float32), self.inv_freq)
        cos, sin = torch.cat([freqs.cos()] * 2, -1), torch.cat([freqs.sin()] * 2, -1)
        half = self.head_dim // 2

        def rotate(t: Any) -> Any:
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

        def heads(x: Any, name: str, count: int) -> Any:
            y = f.linear(x, w[name + ".weight"], w.get(name + ".bias"))
            return y.view(1, n, count, self.head_dim).transpose(1, 2)

        mask = None
        if n > 1:
            mask = torch.ones(n, start + n, dtype=torch.bool).tril(diagonal=start)
        x = self.embed[torch.tensor(list(ids))].unsqueeze(0)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = self._rms(x, p + "input_layernorm.weight")
            q = rotate(heads(h, p + "self_attn.q_proj", self.heads))
            state["k"][i, :, :, start : start + n] = rotate(heads(h, p + "self_attn.k_proj", self.kv_heads))
            state["v"][i, :, :, start : start + n] = heads(h, p + "self_attn.v_proj", self.kv_heads)
            keys, values = state["k"][i, :, :, : start + n], state["v"][i, :, :, : start + n]
            att = f.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            x = x + f.linear(att.transpose(1, 2).reshape(1, n, -1), w[p + "self_attn.o_proj.weight"])
            h = self._rms(x, p + "post_attention_layernorm.weight")
            gate, up = f.linear(h, w[p + "mlp.gate_proj.weight"]), f.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + f.linear(f.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        state["used"] = start + n
        return f.linear(self._rms(x[:, -1], "model.norm.weight"), self.lm_head)[0]


class HFDecoder:
    """The same interface over transformers' causal LM, for other architectures."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        import torch
        import transformers

        self.torch = torch
        self.config = config
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=torch.float32
        ).eval()
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        forward = inspect.signature(self.model.forward).parameters
        self.cache_name = "cache" if "cache" in forward else "past_key_values"  # transformers < 5

    def new_state(self, length: int) -> dict[str, Any]:
        return {"cache": None, "used": 0}

    def step(self, ids: Sequence[int], state: dict[str, Any]) -> Any:
        out = self.model(input_ids=self.torch.tensor([list(ids)]), use_cache=True, **{self.cache_name: state["cache"]})
        state["cache"], state["used"] = out[self.cache_name], state["used"] + len(ids)
        return out.logits[0, -1]


def load_decoder(folder: Path) -> LlamaDecoder | HFDecoder:
    """:class:`LlamaDecoder` where it computes the folder's architecture, else :class:`HFDecoder`."""
    config = _read_json(folder / "config.json")
    if LlamaDecoder.supports(config) and (folder / "model.safetensors").is_file():
        return LlamaDecoder(folder, config)
    return HFDecoder(folder, config)


def generate(
    decoder: LlamaDecoder | HFDecoder,
    prompt: Sequence[int],
    *,
    budget: int,
    eos: Collection[int],
    temperature: float | None = None,
    repeat_penalty: float = 1.0,
    seed: int = 0,
    allowed: Callable[[list[int]], Any] | None = None,
    stop_now: Callable[[list[int]], bool] | None = None,
    compute: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Iterator[int]:
    """The reply's token ids, until an ``eos`` id, ``budget`` ids or ``stop_now(ids)``; greedy unless
    ``temperature`` > 0 (seeded); ``allowed(ids)`` masks the next token; forward steps run inside ``compute()``."""
    torch = decoder.torch
    rng = torch.Generator().manual_seed(int(seed)) if temperature else None
    state = decoder.new_state(len(prompt) + budget)

    def step(ids: Sequence[int]) -> Any:
        with compute(), torch.inference_mode():
            return decoder.step(ids, state).float()

    logits = step(prompt)
    seen = torch.zeros(logits.shape[-1], dtype=torch.bool)
    seen[list(prompt)] = True
    out: list[int] = []
    while len(out) < budget and not (stop_now is not None and stop_now(out)):
        x = logits.clone()
        if repeat_penalty != 1.0:
            picked = x[seen]
            x[seen] = torch.where(picked > 0, picked / repeat_penalty, picked * repeat_penalty)
        if allowed is not None:
            ok = torch.zeros_like(seen)
            mask = torch.from_numpy(allowed(out))
            ok[: len(mask)] = mask
            x = x.masked_fill(~ok, -math.inf)
        if temperature:
            token = int(torch.multinomial(torch.softmax(x / temperature, -1), 1, generator=rng))
        else:
            token = int(x.argmax())
        if token in eos:
            return
        yield token
        out.append(token)
        seen[token] = True
        if len(out) < budget:
            logits = step([token])
