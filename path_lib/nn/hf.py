"""A Hugging Face ``transformers`` model around :class:`path_lib.nn.model.TinyLM` (PaTH / PaTH-FoX attention),
and a converter from fla's PaTH layer weights.

    from path_lib.nn.hf import PaTHConfig, PaTHForCausalLM
    model = PaTHForCausalLM(PaTHConfig(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=2))
    out = model(input_ids, attention_mask=mask, labels=input_ids)          # out.loss, out.logits [B, T, V]
    model.save_pretrained(path); PaTHForCausalLM.from_pretrained(path)
    model.generate(input_ids, attention_mask=mask, max_new_tokens=16)       # greedy, sampling, beams

The model keeps its own cache, :class:`PaTHDynamicCache` (a ``transformers`` ``Cache`` whose layers hold
the PaTH decoding state: keys transformed to the current position, values, gates, the convolution
window), so ``generate()`` prefills the prompt in parallel and then decodes one token per step.
``attention_mask`` is a padding mask ``[B, T]`` (1 = token); left padding for batched generation is
removed exactly (each row computes as if it were alone). Labels follow the convention of
``transformers``: ``labels [B, T]``, shifted inside, ``-100`` ignored.

:func:`from_fla_state_dict` maps the weights of fla's ``fla.layers.PaTHAttention`` onto
:class:`path_lib.nn.layers.PaTHAttention`: ``w_proj.0`` / ``w_proj.1`` -> ``w_down`` / ``w_up`` (a full-rank
``w_proj`` becomes ``w_down = I``), ``w_conv1d`` -> ``w_conv``, ``bt_proj`` -> ``beta_proj``; q, k, v, o
and ``g_proj`` keep their names. :func:`path_attention_from_fla` builds the layer with the sizes read off
the weights.

Needs ``transformers`` (``pip install path-attention-book[hf]``); tested with transformers 5.24.
"""
from __future__ import annotations

import inspect
import json
import os
import re
from typing import Mapping, Optional, Tuple, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from transformers import GenerationMixin, PreTrainedModel
    from transformers.cache_utils import Cache, CacheLayerMixin
    from transformers.modeling_outputs import CausalLMOutputWithPast
    try:
        from transformers import PreTrainedConfig as _ConfigBase
    except ImportError:  # transformers 4.x
        from transformers import PretrainedConfig as _ConfigBase
except ModuleNotFoundError as e:  # pragma: no cover - depends on the environment
    if e.name != "transformers":
        raise
    raise ImportError("path_lib.nn.hf needs transformers: pip install 'path-attention-book[hf]' "
                      "(or pip install transformers)") from e

from ..validation import (FLOAT_DTYPES, check_bool, check_choice, check_finite, check_int, check_number, check_tensor,
                          check_tokens, dtype_name, values_checked)
from ..decoding import is_cache
from .cache import select_state
from ..impl import CHOICES
from .layers import PaTHAttention
from .model import TinyLM

__all__ = ["PaTHConfig", "PaTHForCausalLM", "PaTHDynamicCache", "from_fla_state_dict", "path_attention_from_fla"]

PretrainedConfig = _ConfigBase
# the output's cache field: "cache" in recent transformers, "past_key_values" before
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class PaTHConfig(PretrainedConfig):
    """Configuration of :class:`PaTHForCausalLM`: a pre-norm decoder (LayerNorm, GELU MLP) whose only
    position information is PaTH attention.

    Args:
        vocab_size, hidden_size, num_hidden_layers, num_attention_heads: sizes.
        num_key_value_heads: key/value heads (grouped-query attention), default ``num_attention_heads``.
        head_dim: default ``hidden_size // num_attention_heads``.
        mlp_ratio: MLP width relative to ``hidden_size``.
        use_forget_gate: PaTH-FoX.  w_rank, conv_size, beta_max: PaTH's w and beta (see ``PaTHAttention``).
        backend, block_size: the attention implementation (``"auto"``: the Triton kernels on a verified GPU).
        tie_word_embeddings: share the input embedding and the output head.
    """

    model_type = "path"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]

    def __init__(self, vocab_size: int = 256, hidden_size: int = 128, num_hidden_layers: int = 2,
                 num_attention_heads: int = 2, num_key_value_heads: Optional[int] = None,
                 head_dim: Optional[int] = None, mlp_ratio: float = 4.0, use_forget_gate: bool = False,
                 w_rank: int = 32, conv_size: int = 3, beta_max: Optional[float] = None, backend: str = "auto",
                 block_size: int = 64, tie_word_embeddings: bool = True, use_cache: bool = True, **kwargs):
        for name, value in (("vocab_size", vocab_size), ("hidden_size", hidden_size),
                            ("num_hidden_layers", num_hidden_layers), ("num_attention_heads", num_attention_heads),
                            ("w_rank", w_rank), ("conv_size", conv_size), ("block_size", block_size)):
            check_int(value, name, minimum=1)
        for name, size in (("num_key_value_heads", num_key_value_heads), ("head_dim", head_dim)):
            if size is not None:
                check_int(size, name, minimum=1)
        check_number(mlp_ratio, "mlp_ratio", positive=True)
        if beta_max is not None and not 0 < check_number(beta_max, "beta_max") <= 2:
            raise ValueError(f"beta_max must lie in (0, 2] or be None, got {beta_max}")
        if head_dim is None and hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_attention_heads "
                             f"({num_attention_heads}) unless head_dim is given")
        if num_key_value_heads is not None and num_attention_heads % num_key_value_heads:
            raise ValueError(f"num_attention_heads ({num_attention_heads}) must be a multiple of num_key_value_heads "
                             f"({num_key_value_heads})")
        check_bool(use_forget_gate, "use_forget_gate")
        check_bool(use_cache, "use_cache")
        check_bool(tie_word_embeddings, "tie_word_embeddings")
        check_choice(backend, "backend", CHOICES["path_layer"])
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.num_attention_heads, self.num_key_value_heads, self.head_dim = num_attention_heads, num_key_value_heads, head_dim
        self.mlp_ratio, self.use_forget_gate, self.w_rank, self.conv_size = mlp_ratio, use_forget_gate, w_rank, conv_size
        self.beta_max, self.backend, self.block_size, self.use_cache = beta_max, backend, block_size, use_cache
        # transformers 5's dataclass config declares only its fields, but its __init__ passes other keywords on
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------------------------
# the cache
# ----------------------------------------------------------------------------------------------

class PaTHCacheLayer(CacheLayerMixin):
    """One layer's PaTH decoding state (``state``: the dict ``PaTHAttention`` keeps), as a ``transformers``
    cache layer. Keys are kept transformed to the current position, so the layer cannot be cropped (a
    rollback would have to undo the transforms) and ``update(key_states, value_states)`` is not used."""

    is_compileable = False
    is_sliding = False
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__()
        self.state: Optional[dict] = None

    def lazy_initialization(self, key_states, value_states=None) -> None:
        self.device = key_states.device

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("a PaTH cache layer is filled by PaTHAttention (set_layer_state), not by update()")

    def get_seq_length(self) -> int:
        return 0 if self.state is None else len(self.state["cache"])

    def get_mask_sizes(self, query_length: int):
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.state = None
        self.is_initialized = False

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        select_state(self.state, beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        select_state(self.state, indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.state is not None:
            B = self.state["conv"].shape[0]
            select_state(self.state, torch.arange(B, device=self.state["conv"].device).repeat_interleave(repeats))

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("a PaTH cache cannot be cropped: its keys are transformed to the current position")

    def offload(self):
        pass

    def prefetch(self):
        pass


class PaTHDynamicCache(Cache):
    """The cache of :class:`PaTHForCausalLM`: one ``PaTHCacheLayer`` per layer, created as the layers
    first store a state. Works as ``past_key_values`` for :class:`path_lib.nn.layers.PaTHAttention` too."""

    def __init__(self, **kwargs):
        super().__init__(layer_class_to_replicate=PaTHCacheLayer)

    def get_layer_state(self, layer_idx: int) -> Optional[dict]:
        """Layer ``layer_idx``'s decoding state (an int >= 0), None before that layer stored one."""
        check_int(layer_idx, "layer_idx", minimum=0)
        return self._layer(layer_idx).state if layer_idx < len(self.layers) else None

    def set_layer_state(self, layer_idx: int, state: dict) -> None:
        """Store a PaTH layer's decoding state (the dict ``PaTHAttention`` keeps: ``{"cache", "conv", ...}``)."""
        check_int(layer_idx, "layer_idx", minimum=0)
        if not isinstance(state, dict):
            raise TypeError(f"state must be a PaTH layer's decoding state (a dict), got {type(state).__name__}")
        if not is_cache(state.get("cache")) or not isinstance(state.get("conv"), torch.Tensor):
            raise ValueError("state must be a PaTH layer's decoding state, a dict holding a decoding 'cache' and "
                             f"the 'conv' window, got a dict with keys {sorted(map(str, state))}")
        while len(self.layers) <= layer_idx:
            self.layers.append(PaTHCacheLayer())
        layer = self._layer(layer_idx)
        layer.state = state
        layer.is_initialized = True

    def _layer(self, layer_idx: int) -> PaTHCacheLayer:
        """Layer ``layer_idx``, a ``PaTHCacheLayer`` (the only kind of layer this cache creates)."""
        return cast(PaTHCacheLayer, self.layers[layer_idx])


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------

class PaTHForCausalLM(PreTrainedModel, GenerationMixin):
    """:class:`path_lib.nn.model.TinyLM` with PaTH attention as a ``transformers`` causal LM (``self.model``).

    ``forward(input_ids [B, T], attention_mask=None, cache=None, labels=None, use_cache=None, ...)`` ->
    ``CausalLMOutputWithPast(loss, logits [B, T, V], cache)``. ``past_key_values`` is accepted as the
    older name of ``cache``. The cache is a :class:`PaTHDynamicCache`; the first call with an empty cache
    prefills, later calls decode (one token each, as ``generate`` does).
    """

    config_class = PaTHConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["_Block"]
    _tied_weights_keys = {"model.head.weight": "model.embed.weight"}
    _supports_cache_class = True

    def __init__(self, config: PaTHConfig):
        super().__init__(config)
        self.model = TinyLM(config.vocab_size, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
                            attention="path_fox" if config.use_forget_gate else "path", mlp_ratio=config.mlp_ratio,
                            tie_embeddings=config.tie_word_embeddings, n_kv_heads=config.num_key_value_heads,
                            head_dim=config.head_dim, w_rank=config.w_rank, conv_size=config.conv_size,
                            beta_max=config.beta_max, backend=config.backend, block_size=config.block_size)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False                         # the model makes its own PaTHDynamicCache

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained``, checked: the config in use (the checkpoint's, a ``config=``,
        or changed by keyword arguments such as ``num_hidden_layers=3``) must describe the checkpoint's
        weights. A field that differs from the checkpoint's own ``config.json``, or weights that are
        missing, left over or of another shape, raise a ValueError naming the config field, instead of
        loading randomly initialised weights with only a printed report. An unreadable ``config.json`` and
        a ``dtype`` that names no torch dtype raise a ValueError / TypeError naming them.
        ``ignore_mismatched_sizes=True`` keeps transformers' behaviour for weights of another shape (they are
        initialised afresh; missing and left-over weights are still refused)."""
        _check_load_dtype(kwargs)
        config = kwargs.get("config")
        if config is not None and not isinstance(config, (PaTHConfig, str, os.PathLike)):
            raise TypeError(f"config must be a PaTHConfig (or a path to one), got {type(config).__name__}")
        saved = _saved_config(pretrained_model_name_or_path)
        allow_mismatch = kwargs.pop("ignore_mismatched_sizes", False)
        want_info = kwargs.pop("output_loading_info", False)
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, output_loading_info=True,
                                         ignore_mismatched_sizes=True, **kwargs)
        model, info = cast(Tuple["PaTHForCausalLM", dict], loaded)   # (output_loading_info=True)
        _check_loaded(model.config, saved, info, allow_mismatch, model.state_dict().keys())
        return (model, info) if want_info else model

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """``GenerationMixin.generate``, its sampling and length settings checked first: those given by keyword
        or in ``generation_config`` (else the model's own) must be in range (``top_p`` in (0, 1], ``top_k`` >= 0,
        ``temperature`` > 0, ``max_new_tokens`` >= 1, ``do_sample`` a bool, ...), or a ValueError / TypeError
        names them (transformers itself lets some through, e.g. ``top_p=2`` samples from everything)."""
        _check_generation(self, generation_config, kwargs)
        return super().generate(inputs, generation_config, **kwargs)

    def _init_weights(self, module):
        """TinyLM's initialisation (what a fresh ``TinyLM`` does), for weights a checkpoint does not set."""
        from transformers import initialization as init
        if isinstance(module, nn.Conv1d):            # PaTH's w filter: near the identity (w follows the token)
            if not getattr(module.weight, "_is_hf_initialized", False):
                with torch.no_grad():
                    module.weight.normal_(std=0.02)
                    module.weight[:, 0, -1] += 1.0
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, std=0.02)
            bias = getattr(module, "bias", None)
            if bias is not None:
                init.zeros_(bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def _checked_embeds(self, inputs_embeds) -> torch.Tensor:
        """``inputs_embeds [B, T, hidden_size]`` in the model's dtype (finite where values are checked)."""
        check_tensor(inputs_embeds, "inputs_embeds", ndim=3, dtypes=FLOAT_DTYPES, finite=False)
        lm = self.model
        width, dtype = lm.embed.weight.shape[1], lm.embed.weight.dtype
        if inputs_embeds.shape[-1] != width:
            raise ValueError(f"inputs_embeds must have last dimension hidden_size={width}, "
                             f"got shape {tuple(inputs_embeds.shape)}")
        if inputs_embeds.dtype != dtype and not torch.is_autocast_enabled(inputs_embeds.device.type):
            raise TypeError(f"inputs_embeds must have the model's dtype {dtype_name(dtype)}, "
                            f"got {dtype_name(inputs_embeds.dtype)}")
        if inputs_embeds.device != lm.embed.weight.device:
            raise ValueError(f"inputs_embeds must be on the model's device ({lm.embed.weight.device}), "
                             f"got {inputs_embeds.device}")
        if values_checked(lm.check_values, inputs_embeds):
            check_finite(inputs_embeds, "inputs_embeds")
        return inputs_embeds

    def get_input_embeddings(self):
        return self.model.embed

    def set_input_embeddings(self, value):
        self.model.embed = value

    def get_output_embeddings(self):
        return self.model.head

    def set_output_embeddings(self, value):
        self.model.head = value

    def forward(self, input_ids: Optional[torch.LongTensor] = None, attention_mask: Optional[torch.Tensor] = None,
                cache: Optional[PaTHDynamicCache] = None, labels: Optional[torch.LongTensor] = None,
                use_cache: Optional[bool] = None, return_dict: Optional[bool] = None,
                past_key_values: Optional[PaTHDynamicCache] = None, inputs_embeds: Optional[torch.Tensor] = None,
                logits_to_keep: int = 0, output_attentions: Optional[bool] = None,
                output_hidden_states: Optional[bool] = None, position_ids=None, **kwargs):
        # position_ids are accepted and ignored: PaTH has no positions (they come from the transforms)
        if kwargs:
            raise TypeError(f"PaTHForCausalLM.forward got unexpected arguments {sorted(kwargs)}")
        if output_attentions:
            raise ValueError("output_attentions is not supported: PaTH attention never forms the attention matrix")
        if output_hidden_states:
            raise ValueError("output_hidden_states is not supported")
        if cache is not None and past_key_values is not None:
            raise ValueError("pass the cache once: cache= (or its older name past_key_values=), not both")
        cache = past_key_values if cache is None else cache
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if use_cache is None:
            use_cache = bool(self.config.use_cache) and not self.training
        check_bool(use_cache, "use_cache")
        if return_dict is not None:
            check_bool(return_dict, "return_dict")
        check_int(logits_to_keep, "logits_to_keep", minimum=0)
        lm = self.model
        if input_ids is not None:
            check_tokens(input_ids, lm.vocab_size, ndim=2, name="input_ids",
                         values=isinstance(input_ids, torch.Tensor) and values_checked(lm.check_values, input_ids))
            x = lm.embed(input_ids)
        else:
            x = self._checked_embeds(inputs_embeds)
        if cache is not None and not isinstance(cache, PaTHDynamicCache):
            raise TypeError(f"cache must be a PaTHDynamicCache (the cache this model returns), got {type(cache).__name__}")
        if use_cache and cache is None:
            cache = PaTHDynamicCache()
        for block in lm.blocks:
            h = block.norm1(x)
            if cache is not None:
                a, _, cache = block.attn(h, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            else:
                a = block.attn(h, attention_mask=attention_mask)
            x = x + a
            x = x + block.mlp(block.norm2(x))
        h = lm.norm(x)
        logits = lm.head(h[:, -logits_to_keep:] if logits_to_keep else h)
        loss = None
        if labels is not None:
            if not isinstance(labels, torch.Tensor) or labels.shape != logits.shape[:2] or labels.dtype != torch.int64:
                raise ValueError(f"labels must be an int64 tensor of shape {tuple(logits.shape[:2])} (like input_ids; "
                                 "shifted inside, -100 ignored)")
            if labels.shape[1] < 2:
                raise ValueError(f"labels of shape {tuple(labels.shape)} hold no target: the loss predicts labels[:, 1:] "
                                 "from the tokens before them, so it needs T >= 2")
            if values_checked(lm.check_values, labels):
                if bool(((labels != -100) & ((labels < 0) | (labels >= lm.vocab_size))).any()):
                    raise ValueError(f"labels must lie in [0, {lm.vocab_size}) or be -100 (ignored)")
                if not bool((labels[:, 1:] != -100).any()):
                    raise ValueError("labels hold no target: every label after the first is -100 (ignored), so the "
                                     "loss would be 0 / 0; pass labels=None for no loss")
            lg = logits if logits.dtype == torch.float64 else logits.float()     # the loss in float32 at least
            loss = F.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        # (the cache field's name depends on the transformers version, so it is passed by a dict)
        out = CausalLMOutputWithPast(loss=loss, logits=logits,
                                     **{_CACHE_FIELD: cache if use_cache else None})  # type: ignore[arg-type]
        if return_dict is False:
            return out.to_tuple()
        return out


# ----------------------------------------------------------------------------------------------
# loading: the config against the checkpoint
# ----------------------------------------------------------------------------------------------

#: the config fields that decide the weights' names and shapes
_STRUCTURE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "mlp_ratio", "use_forget_gate", "w_rank", "conv_size", "tie_word_embeddings")
#: a weight's name (its end) -> the config fields its shape depends on
_SHAPE_FIELDS = (("embed.weight", "vocab_size / hidden_size"), ("head.weight", "vocab_size / hidden_size"),
                 ("q_proj.weight", "num_attention_heads / head_dim"), ("o_proj.weight", "num_attention_heads / head_dim"),
                 ("k_proj.weight", "num_key_value_heads / head_dim"), ("v_proj.weight", "num_key_value_heads / head_dim"),
                 ("beta_proj", "num_key_value_heads"), ("g_proj", "num_attention_heads"), ("w_down.weight", "w_rank"),
                 ("w_up.weight", "w_rank / num_key_value_heads / head_dim"),
                 ("w_conv.weight", "conv_size / num_key_value_heads / head_dim"), ("mlp", "mlp_ratio"),
                 ("norm", "hidden_size"))


#: the generation settings :meth:`PaTHForCausalLM.generate` checks, with their check
_GENERATION_CHECKS = {
    "do_sample": lambda v, n: check_bool(v, n), "use_cache": lambda v, n: check_bool(v, n),
    "return_dict_in_generate": lambda v, n: check_bool(v, n), "output_scores": lambda v, n: check_bool(v, n),
    "temperature": lambda v, n: check_number(v, n, positive=True),
    "top_p": lambda v, n: check_number(v, n, minimum=0.0, maximum=1.0, open_min=True),
    "min_p": lambda v, n: check_number(v, n, minimum=0.0, maximum=1.0),
    "typical_p": lambda v, n: check_number(v, n, minimum=0.0, maximum=1.0, open_min=True),
    "top_k": lambda v, n: check_int(v, n, minimum=0),
    "repetition_penalty": lambda v, n: check_number(v, n, positive=True),
    "max_new_tokens": lambda v, n: check_int(v, n, minimum=1), "min_new_tokens": lambda v, n: check_int(v, n, minimum=0),
    "max_length": lambda v, n: check_int(v, n, minimum=1), "min_length": lambda v, n: check_int(v, n, minimum=0),
    "num_beams": lambda v, n: check_int(v, n, minimum=1), "num_return_sequences": lambda v, n: check_int(v, n, minimum=1),
}


def _check_generation(model, generation_config, kwargs: dict) -> None:
    """The settings of a ``generate`` call (keywords over ``generation_config`` over the model's own)."""
    from transformers import GenerationConfig
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        raise TypeError(f"generation_config must be a transformers.GenerationConfig or None, "
                        f"got {type(generation_config).__name__}")
    base = generation_config if generation_config is not None else getattr(model, "generation_config", None)
    for name, check in _GENERATION_CHECKS.items():
        value = kwargs[name] if name in kwargs else getattr(base, name, None)
        if value is not None:
            check(value, name)


def _check_load_dtype(kwargs: dict) -> None:
    """``dtype`` (or its older name ``torch_dtype``): None, ``"auto"``, a torch floating dtype or its name."""
    for name in ("dtype", "torch_dtype"):
        value = kwargs.get(name)
        if value is None or value == "auto" or value in FLOAT_DTYPES:
            continue
        if isinstance(value, str):
            if getattr(torch, value, None) in FLOAT_DTYPES:
                continue
            raise ValueError(f"{name} must be 'auto' or the name of a torch floating dtype "
                             f"({', '.join(dtype_name(d) for d in FLOAT_DTYPES)}), got {value!r}")
        raise TypeError(f"{name} must be None, 'auto', a torch floating dtype or its name, got {value!r}")


def _saved_config(path) -> Optional[dict]:
    """The checkpoint's own ``config.json`` (a dict) when ``path`` is a local folder holding one, else None.
    A file that is not a JSON object is refused by name (transformers would raise an OSError or a bare
    TypeError)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"pretrained_model_name_or_path must be a str or a path, got {type(path).__name__}")
    file = os.path.join(path, "config.json")
    if not os.path.isfile(file):
        return None
    try:
        with open(file, encoding="utf-8") as f:
            saved = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"pretrained_model_name_or_path={str(path)!r}: its config.json is not valid JSON "
                         f"({e}); was it truncated?") from None
    if not isinstance(saved, dict):
        raise TypeError(f"pretrained_model_name_or_path={str(path)!r}: its config.json must hold a JSON object of "
                        f"config fields, got a {type(saved).__name__}")
    for name in ("dtype", "torch_dtype"):          # transformers would look the name up on torch (AttributeError)
        value = saved.get(name)
        if value is not None and not (isinstance(value, str) and getattr(torch, value, None) in FLOAT_DTYPES):
            raise ValueError(f"pretrained_model_name_or_path={str(path)!r}: its config.json's {name} must name a "
                             f"torch floating dtype ({', '.join(dtype_name(d) for d in FLOAT_DTYPES)}), got {value!r}")
    return saved


def _structure(config) -> dict:
    """The structural fields of a config (a PaTHConfig or a config.json dict), defaults resolved."""
    get = config.get if isinstance(config, dict) else lambda name, default=None: getattr(config, name, default)
    default = {name: p.default for name, p in inspect.signature(PaTHConfig.__init__).parameters.items()}
    out = {name: get(name, default[name]) for name in _STRUCTURE}
    if out["num_key_value_heads"] is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    if out["head_dim"] is None and isinstance(out["hidden_size"], int) and isinstance(out["num_attention_heads"], int):
        out["head_dim"] = out["hidden_size"] // max(out["num_attention_heads"], 1)
    return out


def _block(key: str) -> Optional[int]:
    """The block a weight belongs to (``model.blocks.3.attn.q_proj.weight`` -> 3), or None."""
    found = re.match(r"model\.blocks\.(\d+)\.", key)
    return int(found.group(1)) if found else None


def _misfit(config, missing: set, unexpected: set, weights) -> Tuple[Optional[str], str, str]:
    """``(field, kind, key)``: the config field that explains the missing and left-over weights (None
    where none does), and the weight that shows it, ``kind`` "missing" or "unexpected". The same answer
    whatever order transformers lists them in: whole blocks absent or left over name
    ``num_hidden_layers``, a forget gate's weights ``use_forget_gate``, the output head
    ``tie_word_embeddings``, tried in that order over the sorted weight names. ``weights``: the
    model's weight names."""
    loaded_blocks = {_block(k) for k in weights if k not in missing} - {None}

    def whole_block(kind: str, key: str) -> bool:
        block = _block(key)
        if block is None:
            return False
        return block >= config.num_hidden_layers if kind == "unexpected" else block not in loaded_blocks

    rules = (("num_hidden_layers", whole_block), ("use_forget_gate", lambda kind, key: ".g_proj." in key),
             ("tie_word_embeddings", lambda kind, key: key == "model.head.weight"))
    problems = sorted([("missing", k) for k in missing] + [("unexpected", k) for k in unexpected])
    for field, fits in rules:
        for kind, key in problems:
            if fits(kind, key):
                return field, kind, key
    return (None,) + problems[0]


def _check_loaded(config, saved: Optional[dict], info: dict, allow_mismatch: bool, weights=()) -> None:
    """Raise a ValueError naming the config field when the config in use does not describe the weights
    (``weights``: the model's weight names)."""
    if saved is not None and not allow_mismatch:
        mine, theirs = _structure(config), _structure(saved)
        for name in _STRUCTURE:
            if mine[name] != theirs[name]:
                raise ValueError(f"{name}={mine[name]!r} does not match the checkpoint, whose weights were made with "
                                 f"{name}={theirs[name]!r} (its config.json); loading would leave weights randomly "
                                 "initialised. Keep the checkpoint's value (or train a new model)")
    missing, unexpected = set(info.get("missing_keys", ())), set(info.get("unexpected_keys", ()))
    if missing or unexpected:
        field, kind, key = _misfit(config, missing, unexpected, weights)
        what = f"config field {field}={getattr(config, field)!r}" if field else "the config"
        where = "absent from the checkpoint" if kind == "missing" else "in the checkpoint but not in the model"
        raise ValueError(f"{what} does not match the checkpoint: weight {key} is {where}")
    mismatched = [] if allow_mismatch else list(info.get("mismatched_keys", ()))
    if mismatched:
        fields = []
        for key, _, _ in mismatched:
            for end, names in _SHAPE_FIELDS:
                if end in key:
                    fields += [f for f in names.split(" / ") if f not in fields]
        shown = "; ".join(f"{key} is {tuple(a)} in the checkpoint, {tuple(b)} for this config"
                          for key, a, b in mismatched[:3])
        raise ValueError(f"the config's {' / '.join(fields) or 'sizes'} do not match the checkpoint's weights "
                         f"({len(mismatched)} of another shape: {shown})")


# ----------------------------------------------------------------------------------------------
# fla's PaTH layer -> this layer
# ----------------------------------------------------------------------------------------------

_FLA_SAME = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")


def _fla_layer(sd: Mapping, prefix: str) -> dict:
    if not isinstance(sd, Mapping):
        raise TypeError(f"sd must be a state dict (a mapping of names to tensors), got {type(sd).__name__}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    layer = {k[len(prefix):]: v for k, v in sd.items() if isinstance(k, str) and k.startswith(prefix)}
    if not layer:
        raise ValueError(f"sd holds no key starting with prefix {prefix!r}")
    for k, v in layer.items():
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"sd[{prefix + k!r}] must be a tensor, got {type(v).__name__}")
    return layer


def from_fla_state_dict(sd: Mapping, *, prefix: str = "") -> dict:
    """The state dict of fla's ``PaTHAttention`` (keys under ``prefix``, e.g. ``"model.layers.0.attn."``)
    as a state dict of :class:`path_lib.nn.layers.PaTHAttention` (keys without the prefix).

    Supported: low-rank (``w_proj.0``, ``w_proj.1``) or full-rank (``w_proj``) w projections, with the
    short convolution (``w_conv1d``, no bias), with or without the forget gate (``g_proj``). Refused with a
    ValueError: q/k norms (``maybe_q_norm``), no convolution, a convolution bias, unknown keys.
    """
    src = _fla_layer(sd, prefix)
    if any(k.startswith(("maybe_q_norm", "maybe_k_norm")) for k in src):
        raise ValueError("fla's use_qk_norm=True (maybe_q_norm / maybe_k_norm) has no counterpart in PaTHAttention")
    if "w_conv1d.weight" not in src:
        raise ValueError("sd has no w_conv1d.weight: fla's use_w_shortconv=False (no SiLU-convolution on w) has no "
                         "counterpart in PaTHAttention")
    if "w_conv1d.bias" in src:
        raise ValueError("fla's conv_bias=True (w_conv1d.bias) has no counterpart in PaTHAttention")
    missing = [k for k in _FLA_SAME + ("bt_proj.weight", "bt_proj.bias") if k not in src]
    if missing:
        raise ValueError(f"sd is missing {[prefix + k for k in missing]} (not an fla PaTHAttention state dict?)")
    out = {k: src[k] for k in _FLA_SAME}
    if "w_proj.weight" in src:                                     # full rank: w_down = identity
        W = src["w_proj.weight"]
        out["w_down.weight"] = torch.eye(W.shape[1], dtype=W.dtype, device=W.device)
        out["w_up.weight"] = W
    elif "w_proj.0.weight" in src and "w_proj.1.weight" in src:
        out["w_down.weight"], out["w_up.weight"] = src["w_proj.0.weight"], src["w_proj.1.weight"]
    else:
        raise ValueError(f"sd is missing {prefix}w_proj.0.weight / w_proj.1.weight (or a full-rank w_proj.weight)")
    out["w_conv.weight"] = src["w_conv1d.weight"]
    out["beta_proj.weight"], out["beta_proj.bias"] = src["bt_proj.weight"], src["bt_proj.bias"]
    if "g_proj.weight" in src or "g_proj.bias" in src:
        if "g_proj.weight" not in src or "g_proj.bias" not in src:
            raise ValueError(f"sd has only one of {prefix}g_proj.weight and {prefix}g_proj.bias")
        out["g_proj.weight"], out["g_proj.bias"] = src["g_proj.weight"], src["g_proj.bias"]
    known = set(_FLA_SAME) | {"w_proj.weight", "w_proj.0.weight", "w_proj.1.weight", "w_conv1d.weight",
                              "bt_proj.weight", "bt_proj.bias", "g_proj.weight", "g_proj.bias"}
    unknown = sorted(set(src) - known)
    if unknown:
        raise ValueError(f"sd has keys with no counterpart in PaTHAttention: {[prefix + k for k in unknown]}")
    return out


def path_attention_from_fla(sd: Mapping, *, prefix: str = "", **layer_kwargs) -> PaTHAttention:
    """A :class:`PaTHAttention` holding fla's weights, its sizes read off them (d_model, heads, head dim,
    w rank, convolution width, forget gate) and w normalised as fla does (``w_normalization="fla"``), so
    that it computes fla's layer. ``layer_kwargs`` (backend, block_size, ...) go to the layer. The layer
    is in the weights' dtype and on their device."""
    out = from_fla_state_dict(sd, prefix=prefix)
    d_model = out["q_proj.weight"].shape[1]
    n_kv = out["beta_proj.weight"].shape[0]
    kv_dim = out["k_proj.weight"].shape[0]
    if kv_dim % n_kv:
        raise ValueError(f"k_proj has {kv_dim} rows, not a multiple of the {n_kv} key heads of bt_proj")
    head_dim = kv_dim // n_kv
    q_dim = out["q_proj.weight"].shape[0]
    if q_dim % head_dim:
        raise ValueError(f"q_proj has {q_dim} rows, not a multiple of the head dim {head_dim}")
    for key in ("forget_gate", "use_forget_gate", "d_model", "n_heads", "n_kv_heads", "head_dim", "w_rank",
                "conv_size"):
        if key in layer_kwargs:
            raise TypeError(f"{key} is read off the weights; do not pass it")
    layer = PaTHAttention(d_model, q_dim // head_dim, n_kv, head_dim, w_rank=out["w_down.weight"].shape[0],
                          conv_size=out["w_conv.weight"].shape[-1], use_forget_gate="g_proj.weight" in out,
                          **{"w_normalization": "fla", **layer_kwargs})
    ref = out["q_proj.weight"]
    for key, value in out.items():
        if value.dtype not in FLOAT_DTYPES:
            raise TypeError(f"sd[{key!r}] must be a floating-point tensor, got {dtype_name(value.dtype)}")
        if value.dtype != ref.dtype or value.device != ref.device:
            raise TypeError(f"sd holds weights of several dtypes or devices: {key} is {dtype_name(value.dtype)} on "
                            f"{value.device}, q_proj.weight {dtype_name(ref.dtype)} on {ref.device}; convert them "
                            "to one first")
    layer = layer.to(device=ref.device, dtype=ref.dtype)
    try:
        layer.load_state_dict(out, strict=True)
    except RuntimeError as e:
        raise ValueError(f"the fla weights do not fit one PaTHAttention layer: {e}") from None
    return layer


def _register_auto_classes() -> None:
    """Make ``AutoConfig`` / ``AutoModelForCausalLM`` know model_type ``"path"`` (done on import), so a
    saved model loads with ``AutoModelForCausalLM.from_pretrained(folder)`` once path_lib.nn.hf is imported."""
    from transformers import AutoConfig, AutoModelForCausalLM
    AutoConfig.register(PaTHConfig.model_type, PaTHConfig, exist_ok=True)
    AutoModelForCausalLM.register(PaTHConfig, PaTHForCausalLM, exist_ok=True)


_register_auto_classes()
