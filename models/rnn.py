"""Recurrent encoder-decoder pieces shared by ``seq2seq`` and the tree models.

* ``LeafEncoder``: embeddings + (bi)GRU/LSTM over the source subwords, packed so padding never
  leaks into real positions.
* ``AttentionDecoder``: the input-feeding decoder of Luong et al. 2015 with ``general``
  (Luong) or additive (Bahdanau et al. 2015) scores over an encoder *memory* (words, or words
  and phrase nodes for the tree encoders).  With a ``gate`` it computes the weighted attention
  of Yang et al. 2017 (eq. 4): one attention over all nodes whose lexical and phrase parts are
  mixed by a scalar β — fixed, or predicted from the composite hidden state h̃.
* ``RecurrentTranslator``: encoder + decoder with the decoding interface of ``models.search``
  (``encode``, ``start_state``, ``step``); the four models differ only in their encoder.

Shape legend: B batch, S source length, N memory nodes (S words [+ S-1 phrases]), T target
length, E embedding dim, H decoder/memory dim, V vocabulary.  Masks: True = valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.dbsa import NO_PARSE_HEADS, ParseSupervision
from models.inputs import ModelOutput, Source

RNNName = Literal["seq2seq", "tree2seq", "hier_tree_gru", "gumbel_tree"]
Gate = Literal["fixed0", "fixed05", "fixed1", "learned"]
FIXED_BETA = {"fixed0": 0.0, "fixed05": 0.5, "fixed1": 1.0}


@dataclass(frozen=True, kw_only=True)
class RNNConfig:
    name: RNNName = "seq2seq"
    d_embed: int = 256
    d_hidden: int = 256  # per direction of the leaf RNN; memory/decoder dim is 2× if bidirectional
    rnn_cell: Literal["gru", "lstm"] = "lstm"  # leaf encoder and decoder cell
    num_layers: int = 1  # stacked layers of the decoder, and of the leaf RNN unless leaf_layers is set
    leaf_layers: int | None = None  # layers of the leaf RNN (Currey & Heafield's tree models: 1); None: num_layers
    bidirectional: bool = True  # bidirectional leaves (Yang et al. Table 3 switch)
    attention: Literal["luong", "bahdanau"] = "luong"
    dropout: float = 0.2
    # tree2seq (Eriguchi et al. 2016): the bottom-up composition cell
    tree_cell: Literal["gru", "lstm"] = "lstm"
    # hier_tree_gru (Yang et al. 2017) and gumbel_tree (Currey & Heafield 2018)
    top_down: bool = True  # the top-down pass (Table 3 switch / their §3.3)
    gate: Gate = "learned"  # hier_tree_gru: β weighting lexical vs phrase context (eq. 4)
    gumbel_tau: float = 0.5  # gumbel_tree: Gumbel-softmax temperature (paper: 0.5)

    @property
    def packable(self) -> bool:
        """No packed rows (``models.inputs.Packing``): a recurrent encoder would carry its state
        from one sentence into the next, and the tree encoders read one tree per row."""
        return False

    def parse_supervision(self) -> ParseSupervision:
        """The recurrent and tree models have no parse heads."""
        return NO_PARSE_HEADS

    @property
    def d_memory(self) -> int:
        return self.d_hidden * (2 if self.bidirectional else 1)

    def validate(self) -> None:
        for key in ("d_embed", "d_hidden", "num_layers", "leaf_layers"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.gumbel_tau <= 0:
            raise ValueError(f"gumbel_tau must be positive, got {self.gumbel_tau}")


@dataclass
class Memory:
    """What the decoder attends to, plus the vector its state starts from."""

    states: Tensor  # [B, N, H]
    valid: Tensor  # [B, N] bool
    lexical: Tensor  # [B, N] bool: word (leaf) nodes; the rest are phrase nodes
    summary: Tensor  # [B, H] the decoder is initialised from it (last states / tree root)


@dataclass
class EncodedMemory:
    """``Memory`` with attention keys computed once per sentence (repeated per beam, never reordered)."""

    memory: Memory
    keys: Tensor  # [B, N, H]


@dataclass
class RNNState:
    hidden: Tensor  # [B, L, H] per decoder layer; the top one queries the attention
    cell: Tensor  # [B, L, H] (zeros for a GRU decoder)
    feed: Tensor  # [B, H] attentional vector of the previous step (input feeding)


def masked_softmax(scores: Tensor, valid: Tensor) -> Tensor:
    """Softmax over valid positions; a row with none is all zeros (not NaN)."""
    scores = scores.masked_fill(~valid, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


class LeafEncoder(nn.Module):
    """Embeddings and a packed (bi)directional RNN over the source subwords."""

    def __init__(self, config: RNNConfig, vocab: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, config.d_embed, padding_idx=0)
        rnn = nn.LSTM if config.rnn_cell == "lstm" else nn.GRU
        layers = config.leaf_layers or config.num_layers
        self.rnn = rnn(config.d_embed, config.d_hidden, num_layers=layers, batch_first=True,
                       bidirectional=config.bidirectional, dropout=config.dropout if layers > 1 else 0.0)
        self.dropout = nn.Dropout(config.dropout)
        self.bidirectional = config.bidirectional

    def forward(self, src: Source) -> tuple[Tensor, Tensor]:
        """→ states [B, S, H] (zero on padding) and a summary [B, H]: the last forward state
        (and the first backward state).

        The RNN runs in float32 under autocast: PyTorch's autocast casts a cuDNN RNN to float16
        whatever dtype it was asked for (bf16 here), and float16 gradients without loss scaling
        can underflow."""
        x = self.dropout(self.embed(src.ids))  # [B, S, E]
        with torch.autocast(x.device.type, enabled=False):
            packed = pack_padded_sequence(x.float(), src.lengths.cpu(), batch_first=True, enforce_sorted=False)
            output, _ = self.rnn(packed)
        states, _ = pad_packed_sequence(output, batch_first=True, total_length=src.ids.shape[1])  # [B, S, H]
        last = states[torch.arange(len(src.lengths)), src.lengths - 1]  # [B, H]
        if self.bidirectional:
            half = states.shape[-1] // 2
            last = torch.cat([last[:, :half], states[:, 0, half:]], dim=-1)
        return self.dropout(states), last


class SequentialEncoder(nn.Module):
    """``seq2seq``: the decoder attends over the leaf states."""

    def __init__(self, config: RNNConfig, vocab: int):
        super().__init__()
        self.leaves = LeafEncoder(config, vocab)

    def forward(self, src: Source) -> Memory:
        states, summary = self.leaves(src)
        valid = src.valid
        return Memory(states=states, valid=valid, lexical=valid, summary=summary)


class AttentionDecoder(nn.Module):
    """Input feeding (Luong et al. 2015): s_t = RNN([y_{t-1}; h̃_{t-1}], s_{t-1});
    c_t = Σ_j a_tj m_j; h̃_t = tanh(W_c [c_t; s_t]); p(y_t) = softmax(W_o h̃_t).

    With ``num_layers`` L > 1 the RNN is a stack (Luong et al.'s stacking): layer l reads layer
    l−1's new state (with dropout between layers), and the top layer's s_t is the query."""

    def __init__(self, config: RNNConfig, vocab: int, gate: Gate | None = None):
        super().__init__()
        d = config.d_memory
        self.embed = nn.Embedding(vocab, config.d_embed, padding_idx=0)
        self.cell_type = config.rnn_cell
        cell = nn.LSTMCell if config.rnn_cell == "lstm" else nn.GRUCell
        self.cell = cell(config.d_embed + d, d)  # layer 1
        self.upper_cells = nn.ModuleList(cell(d, d) for _ in range(config.num_layers - 1))  # layers 2..L
        self.num_layers = config.num_layers
        self.init = nn.Linear(d, config.num_layers * d)  # s_0 = tanh(W summary), every layer
        self.score_type = config.attention
        if config.attention == "luong":
            self.key = nn.Linear(d, d, bias=False)  # general: s_tᵀ W m_j
        else:
            self.key = nn.Linear(d, d, bias=False)  # additive: vᵀ tanh(W1 m_j + W2 s_t)
            self.query = nn.Linear(d, d)
            self.energy = nn.Linear(d, 1, bias=False)
        self.combine = nn.Linear(2 * d, d, bias=False)  # W_c
        self.output = nn.Linear(d, vocab)
        self.dropout = nn.Dropout(config.dropout)
        self.gate = gate
        self.beta = nn.Linear(d, 1) if gate == "learned" else None  # β_t = σ(w·h̃_{t-1} + b)

    def prepare(self, memory: Memory) -> EncodedMemory:
        return EncodedMemory(memory=memory, keys=self.key(memory.states))

    def start(self, encoded: EncodedMemory) -> RNNState:
        summary = encoded.memory.summary  # [B, H]
        hidden = torch.tanh(self.init(summary)).view(summary.shape[0], self.num_layers, -1)  # [B, L, H]
        return RNNState(hidden=hidden, cell=torch.zeros_like(hidden), feed=torch.zeros_like(summary))

    def step(self, encoded: EncodedMemory, state: RNNState, tokens: Tensor) -> tuple[Tensor, RNNState]:
        """tokens [B] → logits [B, V] and the next state."""
        x = torch.cat([self.dropout(self.embed(tokens)), state.feed], dim=-1)  # [B, E + H]
        hiddens, cells = [], []
        for layer, cell in enumerate([self.cell, *self.upper_cells]):
            if layer:
                x = self.dropout(x)  # between stacked layers
            if self.cell_type == "lstm":
                x, c = cell(x, (state.hidden[:, layer], state.cell[:, layer]))
            else:
                x, c = cell(x, state.hidden[:, layer]), state.cell[:, layer]
            hiddens.append(x)
            cells.append(c)
        hidden = x  # [B, H] the top layer's s_t
        context = self.context(encoded, hidden, state.feed)  # [B, H]
        feed = torch.tanh(self.combine(torch.cat([context, hidden], dim=-1)))  # h̃_t
        logits = self.output(self.dropout(feed))
        return logits, RNNState(hidden=torch.stack(hiddens, 1), cell=torch.stack(cells, 1), feed=feed)

    def context(self, encoded: EncodedMemory, hidden: Tensor, feed: Tensor) -> Tensor:
        """c_t from one attention over all memory nodes (Yang et al. §3.4: "the phrase and
        lexical context vectors are learned by a single attention model").  With a gate, its
        lexical and phrase parts are weighted by (1 − β_t) and β_t (their eq. 4), so β = 0.5
        is exactly half the plain tree attention (their eq. 2)."""
        memory = encoded.memory
        weights = masked_softmax(self.scores(encoded.keys, hidden), memory.valid)  # [B, N]: one softmax
        if self.gate is None:
            return (weights[:, None, :] @ memory.states)[:, 0]  # [B, H]
        lexical = weights * memory.lexical  # [B, N]: the word nodes' share of the one distribution
        c_lex = (lexical[:, None, :] @ memory.states)[:, 0]  # [B, H]
        c_phrase = ((weights - lexical)[:, None, :] @ memory.states)[:, 0]
        beta = self.gate_value(feed, memory)  # [B, 1]
        return (1.0 - beta) * c_lex + beta * c_phrase  # Yang et al. eq. 4

    def gate_value(self, feed: Tensor, memory: Memory) -> Tensor:
        """β_t: fixed, or σ(w·h̃_{t-1} + b) from the target composite hidden state.  Yang et al.
        take the gate from the composite state h̃ ("dominated by the target composite hidden
        state alone"); h̃_t itself needs c_t, so β_t reads the previous one, h̃_{t-1}, the
        vector input feeding carries (zero at t = 1).  A one-word sentence has no phrase node:
        its β is 0 (all weight on the word)."""
        if self.gate == "learned":
            beta = torch.sigmoid(self.beta(feed))
        else:
            beta = feed.new_full((feed.shape[0], 1), FIXED_BETA[self.gate])
        has_phrases = (memory.valid & ~memory.lexical).any(dim=-1, keepdim=True)  # one-word sentences
        return torch.where(has_phrases, beta, torch.zeros_like(beta))

    def scores(self, keys: Tensor, hidden: Tensor) -> Tensor:
        if self.score_type == "luong":
            return (keys @ hidden[:, :, None])[:, :, 0]  # [B, N]
        return self.energy(torch.tanh(keys + self.query(hidden)[:, None, :]))[:, :, 0]


class RecurrentTranslator(nn.Module):
    """An encoder producing a ``Memory`` and the attentional decoder; teacher forcing runs the
    decoder step by step (it is recurrent), decoding uses the same ``step``."""

    # a tree encoder may leave a module unused in a batch (e.g. only one-word sentences): DDP
    # must look for unused parameters (``find_unused_parameters``)
    may_skip_parameters = True

    def __init__(self, config: RNNConfig, encoder: nn.Module, decoder: AttentionDecoder):
        super().__init__()
        config.validate()
        self.config, self.encoder, self.decoder = config, encoder, decoder
        for name, parameter in self.named_parameters():
            if parameter.dim() >= 2 and "embed" not in name:
                nn.init.xavier_uniform_(parameter)

    def forward(self, src: Source, tgt_in: Tensor) -> ModelOutput:
        encoded = self.encode(src)
        state = self.decoder.start(encoded)
        logits = []
        for t in range(tgt_in.shape[1]):
            step_logits, state = self.decoder.step(encoded, state, tgt_in[:, t])
            logits.append(step_logits)
        return ModelOutput(logits=torch.stack(logits, dim=1))  # [B, T, V]

    def encode(self, src: Source) -> EncodedMemory:
        return self.decoder.prepare(self.encoder(src))

    def start_state(self, encoded: EncodedMemory) -> RNNState:
        return self.decoder.start(encoded)

    def step(self, encoded: EncodedMemory, state: RNNState, tokens: Tensor) -> tuple[Tensor, RNNState]:
        logits, state = self.decoder.step(encoded, state, tokens)
        return F.log_softmax(logits.float(), dim=-1), state
