"""The Transformer family: ``transformer`` (Vaswani et al. 2017), ``transformer_rel`` (Shaw et
al. 2018), ``dbsa`` (Deguchi et al. 2019) and ``deprel`` (Omote et al. 2019).

One encoder-decoder; the variants are switched on by constructor arguments built from the
config (relative tables, parse heads), never by ``if name == ...`` in ``forward``.  DBSA and
deprel compose: a DBSA model may use dependency relative positions too.

Shape legend: B batch, S source length, T decoder input length, D model dim, V vocabulary.
Masks are bool, True = may attend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from models.dbsa import BiaffineParseHead, DecoderParseTarget, ParseSupervision
from models.inputs import ModelOutput, Packing, Source, same_sentence
from models.layers import Embedding, FeedForward, MultiHeadAttention, RelativeLabels, Residual
from models.relative import RelativeEmbeddings, depth_labels, position_labels

TransformerName = Literal["transformer", "transformer_rel", "dbsa", "deprel"]


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    name: TransformerName = "transformer"
    # size; paper: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pre_norm: bool = False  # the paper is post-LN
    tie_target_embeddings: bool = True  # decoder input embedding = output projection
    # Vaswani et al. 2017, §3.4: "we share the same weight matrix between the two embedding layers
    # and the pre-softmax linear transformation" (fairseq's --share-all-embeddings): the source
    # embedding too, which needs one vocabulary for both languages (prepare --joint-vocab)
    share_all_embeddings: bool = False
    # token embeddings (the tied output layer too): "normal" N(0, D^-1/2) as fairseq (the DBSA
    # authors' code), "xavier" uniform as JoeyNMT; Vaswani et al. state none (docs/performance.md)
    embed_init: Literal["normal", "xavier"] = "normal"
    absolute_positions: bool = True  # sinusoidal; relative models may switch them off
    # Shaw et al. 2018: relative positions in encoder and decoder self-attention
    use_rel: bool = False
    k_clip: int = 16
    # Omote et al. 2019: relative depth on the source tree in encoder self-attention
    use_dep: bool = False
    l_clip: int = 2
    dep_keys: bool = True  # b^K (their Table 3 ablation)
    dep_values: bool = True  # b^V
    # Deguchi et al. 2019: 1-based layer holding the parse head (None = no parse head there)
    p_enc: int | None = None
    p_dec: int | None = None
    lambda_enc: float = 1.0  # loss weights of eq. 18 (parse_supervision)
    lambda_dec: float = 1.0
    dec_parse_target: DecoderParseTarget = "output"  # which decoder position is supervised (models/dbsa.py)

    @property
    def packable(self) -> bool:
        """Training may pack several sentences per row (``models.inputs.Packing``): every
        attention, the parse heads' included, is confined to its own sentence."""
        return True

    def parse_supervision(self) -> ParseSupervision:
        """Eq. 18's weights for the parse heads this model has (0 where it has none)."""
        return ParseSupervision(lambda_enc=self.lambda_enc if self.p_enc is not None else 0.0,
                                lambda_dec=self.lambda_dec if self.p_dec is not None else 0.0,
                                dec_target=self.dec_parse_target)

    def validate(self) -> None:
        """Raise ValueError for any inconsistent setting (called by ``build_model``)."""
        positive = {"num_encoder_layers": self.num_encoder_layers, "num_decoder_layers": self.num_decoder_layers,
                    "d_model": self.d_model, "num_heads": self.num_heads, "d_ff": self.d_ff}
        for key, value in positive.items():
            if value < 1:
                raise ValueError(f"{key} must be positive, got {value}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        if self.share_all_embeddings and not self.tie_target_embeddings:
            raise ValueError("share_all_embeddings ties the target embeddings too: "
                             "leave tie_target_embeddings true")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoidal positions, got {self.d_model}")
        for key, value in {"dropout": self.dropout, "attention_dropout": self.attention_dropout}.items():
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{key} must be in [0, 1), got {value}")
        self._validate_syntax()

    def _validate_syntax(self) -> None:
        for key, layer, count in (("p_enc", self.p_enc, self.num_encoder_layers),
                                  ("p_dec", self.p_dec, self.num_decoder_layers)):
            if layer is not None and not 1 <= layer <= count:
                raise ValueError(f"{key}={layer} is outside layers 1..{count}")
        if (self.p_enc is not None or self.p_dec is not None) and self.num_heads < 2:
            raise ValueError("a parse head replaces one of the heads: num_heads must be ≥ 2")
        if self.use_rel and self.k_clip < 1:
            raise ValueError(f"k_clip must be ≥ 1, got {self.k_clip}")
        if self.use_dep and self.l_clip < 1:
            raise ValueError(f"l_clip must be ≥ 1, got {self.l_clip}")
        if self.dec_parse_target not in ("input", "output"):
            raise ValueError(f"dec_parse_target must be 'input' or 'output', got {self.dec_parse_target!r}")
        if self.use_dep and not (self.dep_keys or self.dep_values):
            raise ValueError("use_dep needs dep_keys, dep_values or both")
        parse = self.p_enc is not None or self.p_dec is not None
        if self.name == "transformer" and (self.use_rel or self.use_dep or parse):
            raise ValueError("'transformer' is the plain baseline: use transformer_rel, deprel or dbsa "
                             "for syntax/relative terms")
        if self.name == "transformer_rel" and (not self.use_rel or self.use_dep or parse):
            raise ValueError("'transformer_rel' needs use_rel=true and no dependency features (see deprel, dbsa)")
        if self.name == "deprel" and not self.use_dep:
            raise ValueError("'deprel' needs use_dep=true")
        if self.name == "dbsa" and not parse:
            raise ValueError("'dbsa' needs a parse head: set p_enc and/or p_dec")


class EncoderLayer(nn.Module):
    def __init__(self, self_attention: MultiHeadAttention, config: TransformerConfig):
        super().__init__()
        self.self_attention = self_attention
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.attention_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.ffn_residual = Residual(config.d_model, config.dropout, config.pre_norm)

    def forward(self, x: Tensor, allowed: Tensor, labels: RelativeLabels) -> tuple[Tensor, Tensor | None]:
        x, parse = self.attention_residual(
            x, lambda h: self.self_attention(h, self.self_attention.project_memory(h), allowed, labels))
        x, _ = self.ffn_residual(x, lambda h: (self.feed_forward(h), None))
        return x, parse


class DecoderLayer(nn.Module):
    def __init__(self, self_attention: MultiHeadAttention, config: TransformerConfig):
        super().__init__()
        self.self_attention = self_attention
        self.cross_attention = MultiHeadAttention(config.d_model, config.num_heads, config.attention_dropout)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.residuals = nn.ModuleList(Residual(config.d_model, config.dropout, config.pre_norm) for _ in range(3))

    def forward(self, x: Tensor, memory_kv: dict[str, Tensor], src_allowed: Tensor, self_allowed: Tensor,
                labels: RelativeLabels, cache: dict[str, Tensor] | None) -> tuple[Tensor, Tensor | None]:
        """``cache`` (incremental decoding) holds this layer's past self-attention keys/values."""

        def self_attend(h: Tensor):
            kv = self.self_attention.project_memory(h)
            if cache is not None:
                kv = {name: torch.cat([cache[name], new], dim=-2) if name in cache else new for name, new in kv.items()}
                cache.update(kv)
            return self.self_attention(h, kv, self_allowed, labels)

        x, parse = self.residuals[0](x, self_attend)
        x, _ = self.residuals[1](x, lambda h: self.cross_attention(h, memory_kv, src_allowed))
        x, _ = self.residuals[2](x, lambda h: (self.feed_forward(h), None))
        return x, parse


@dataclass
class EncoderOutput:
    memory: Tensor  # [B, S, D]
    src_valid: Tensor  # [B, S] bool
    memory_kv: list[dict[str, Tensor]]  # per decoder layer: cross-attention keys/values [B, H, S, K]
    parse_logprobs: Tensor | None  # [B, S, S]
    src_sentence: Tensor | None = None  # [B, S] packed rows: the sentence of each source position


@dataclass
class DecoderState:
    """Incremental decoding state: per layer self-attention keys/values, and the step."""

    caches: list[dict[str, Tensor]]
    step: Tensor  # [B] (all equal) position of the next input token


class Transformer(nn.Module):
    """Encoder-decoder with optional Shaw/Omote relative terms and DBSA parse heads."""

    def __init__(self, config: TransformerConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        config.validate()
        self.config = config
        self.src_embed = Embedding(src_vocab, config.d_model, config.dropout, config.absolute_positions)
        self.tgt_embed = Embedding(tgt_vocab, config.d_model, config.dropout, config.absolute_positions)
        self.encoder_layers = nn.ModuleList(EncoderLayer(self._self_attention(i, encoder=True), config)
                                            for i in range(1, config.num_encoder_layers + 1))
        self.decoder_layers = nn.ModuleList(DecoderLayer(self._self_attention(i, encoder=False), config)
                                            for i in range(1, config.num_decoder_layers + 1))
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.generator = nn.Linear(config.d_model, tgt_vocab, bias=False)
        _init_weights(self, config.d_model, config.embed_init)
        if config.tie_target_embeddings:
            self.generator.weight = self.tgt_embed.tokens.weight  # [V, D]
        if config.share_all_embeddings:  # §3.4: one [V, D] matrix for source, target and softmax
            if src_vocab != tgt_vocab:
                raise ValueError(f"share_all_embeddings needs one vocabulary: the source has {src_vocab} "
                                 f"subwords, the target {tgt_vocab}")
            self.src_embed.tokens.weight = self.tgt_embed.tokens.weight
        for module in self.modules():
            if isinstance(module, BiaffineParseHead):
                module.reset_biaffine()  # its own initialisation (models/dbsa.py), not the generic one

    def _self_attention(self, layer: int, encoder: bool) -> MultiHeadAttention:
        c = self.config
        head_dim = c.d_model // c.num_heads
        rel_position = RelativeEmbeddings(c.k_clip, head_dim) if c.use_rel else None
        rel_depth = (RelativeEmbeddings(c.l_clip, head_dim, keys=c.dep_keys, values=c.dep_values)
                     if c.use_dep and encoder else None)
        parse_layer = c.p_enc if encoder else c.p_dec
        parse_head = BiaffineParseHead(c.d_model, head_dim) if parse_layer == layer else None
        return MultiHeadAttention(c.d_model, c.num_heads, c.attention_dropout, rel_position=rel_position,
                                  rel_depth=rel_depth, parse_head=parse_head)

    # ------------------------------------------------------------------ teacher forcing
    def forward(self, src: Source, tgt_in: Tensor, tgt_packed: Packing | None = None) -> ModelOutput:
        """src [B, S]; tgt_in [B, T] = BOS y1 .. y_{T-1} → logits [B, T, V] and parse log-probs.
        Packed rows (``src.packed`` and ``tgt_packed``: target sentence k answers source sentence
        k of the same row) compute what one sentence per row would."""
        if (src.packed is None) != (tgt_packed is None):
            raise ValueError("pack the source and the target rows together, or neither")
        encoded = self.encode(src)
        hidden, parse = self._decode(tgt_in, encoded, caches=None, offset=0, packed=tgt_packed)
        return ModelOutput(logits=self.generator(hidden), enc_parse_logprobs=encoded.parse_logprobs,
                           dec_parse_logprobs=parse)

    def encode(self, src: Source) -> EncoderOutput:
        valid = src.valid  # [B, S]
        packed = src.packed
        x = self.src_embed(src.ids, positions=packed.position if packed else None)  # [B, S, D]
        labels = self._encoder_labels(src)  # packed: within a sentence, row distances are its own
        allowed = (same_sentence(packed.sentence, packed.sentence) if packed
                   else valid[:, None, :].expand(-1, valid.shape[1], -1))  # [B, S(query), S(key)]
        parse_logprobs = None
        for layer in self.encoder_layers:
            x, parse = layer(x, allowed, labels)
            parse_logprobs = parse if parse is not None else parse_logprobs
        memory = self.encoder_norm(x)
        memory_kv = [layer.cross_attention.project_memory(memory) for layer in self.decoder_layers]
        return EncoderOutput(memory=memory, src_valid=valid, memory_kv=memory_kv, parse_logprobs=parse_logprobs,
                             src_sentence=packed.sentence if packed else None)

    def _encoder_labels(self, src: Source) -> RelativeLabels:
        length, device = src.ids.shape[1], src.ids.device
        labels = RelativeLabels()
        if self.config.use_rel:
            labels.position = position_labels(length, length, self.config.k_clip, device=device)  # [S, S]
        if self.config.use_dep:
            if src.depth is None:
                raise ValueError("deprel needs the source depths (Source.depth)")
            labels.depth = depth_labels(src.depth, self.config.l_clip)  # [B, S, S]
        return labels

    def _decode(self, tgt_in: Tensor, encoded: EncoderOutput, caches: list[dict] | None, offset: int,
                packed: Packing | None = None):
        """tgt_in [B, T] starting at position ``offset`` → hidden [B, T, D], parse log-probs."""
        length, device = tgt_in.shape[1], tgt_in.device
        total = offset + length  # keys: all positions so far
        x = self.tgt_embed(tgt_in, offset, positions=packed.position if packed else None)
        query_pos = torch.arange(offset, total, device=device)
        causal = query_pos[:, None] >= torch.arange(total, device=device)[None, :]  # [T, total]
        if packed is None:
            self_allowed = causal[None].expand(tgt_in.shape[0], -1, -1)  # [B, T, total]
            src_allowed = encoded.src_valid[:, None, :].expand(-1, length, -1)  # [B, T, S]
        else:  # each target sentence sees its own past and its own source sentence
            self_allowed = causal[None] & same_sentence(packed.sentence, packed.sentence)
            src_allowed = same_sentence(packed.sentence, encoded.src_sentence)
        labels = RelativeLabels(position=position_labels(length, total, self.config.k_clip, offset, device)
                                if self.config.use_rel else None)
        parse_logprobs = None
        for i, layer in enumerate(self.decoder_layers):
            cache = caches[i] if caches is not None else None
            x, parse = layer(x, encoded.memory_kv[i], src_allowed, self_allowed, labels, cache)
            parse_logprobs = parse if parse is not None else parse_logprobs
        return self.decoder_norm(x), parse_logprobs

    # ------------------------------------------------------------------ incremental decoding
    def start_state(self, encoded: EncoderOutput) -> DecoderState:
        batch = encoded.memory.shape[0]
        return DecoderState(caches=[{} for _ in self.decoder_layers],
                            step=torch.zeros(batch, dtype=torch.long, device=encoded.memory.device))

    def step(self, encoded: EncoderOutput, state: DecoderState, tokens: Tensor) -> tuple[Tensor, DecoderState]:
        """One decoder step: tokens [B] at position ``state.step`` → log-probs [B, V], new state."""
        offset = int(state.step[0]) if state.step.numel() else 0
        hidden, _ = self._decode(tokens[:, None], encoded, state.caches, offset)  # [B, 1, D]
        log_probs = torch.log_softmax(self.generator(hidden[:, 0]).float(), dim=-1)
        return log_probs, DecoderState(caches=state.caches, step=state.step + 1)


def _init_weights(model: nn.Module, d_model: int, embed_init: str = "normal") -> None:
    """Xavier-uniform matrices, zero biases; token embeddings N(0, D^-1/2) (fairseq) or
    Xavier-uniform (JoeyNMT), their padding row zero; in one place."""
    for name, parameter in model.named_parameters():
        if "tokens.weight" in name:
            if embed_init == "xavier":
                nn.init.xavier_uniform_(parameter)
            else:
                nn.init.normal_(parameter, mean=0.0, std=d_model ** -0.5)
            with torch.no_grad():
                parameter[0].zero_()  # the padding embedding
        elif parameter.dim() >= 2:
            nn.init.xavier_uniform_(parameter)
        elif name.endswith("bias"):
            nn.init.zeros_(parameter)
