"""2:4 sparsity with layer-wise error compensation (SparseGPT / Optimal Brain Surgeon), only where the target uses it.

In every group of four consecutive input channels at each kernel tap, two weights become zero: TensorRT's sparse
tensor cores want the zeros along the input channels (C) of a convolution. The weights are visited column by column
(taps outer, channels inner; the bias last and never zeroed); at the start of each group of four the two with the
least saliency w^2 / [H^-1]_jj^2 per output are chosen, and each column's error is pushed onto the columns not yet
visited through the Cholesky factor of H^-1 (Frantar & Alistarh, SparseGPT, 2023), H being the layer's input Hessian
from the calibration frames (statistics.py).

Where it pays (RULES, with sources): the GPU's sparse tensor cores on Orin and Thor (Ampere and later) for wide layers;
Orin's DLA in INT8 for convolutions with more than 64 input channels, from the TensorRT versions whose DLA takes
sparse weights. ONNX Runtime's CPU backend has no sparse kernels: no CPU gain is ever claimed.
"""

from __future__ import annotations

import numpy as np

from tools.optimize.reconstruct import DAMPING

RULES = (
    {"engine": "gpu", "platforms": "Jetson Orin, DRIVE Orin, Thor (Ampere-class sparse tensor cores)",
     "layers": "convolutions and GEMMs with both channel counts at least 256, C a multiple of 4",
     "gain": "TensorRT picks sparse tactics only where they win: typically about 15 % end to end",
     "sources": ["NVIDIA Ampere architecture whitepaper (2:4 structured sparsity)", "TensorRT GitHub issues 2310 and 4065"]},
    {"engine": "dla", "platforms": "Jetson AGX Orin, Orin NX (DLA 2.0); not Thor (no DLA)",
     "layers": "INT8 dense 2-D convolutions with more than 64 input channels and K % 64 in {0, 1, 2, 4, 8, 16, 32} (the latter unconfirmed) "
               "(tools/perf/engines.py dla_sparse_reason); never FP16", "tensorrt": "8.6 and 10.x (DLA); TensorRT 11.0-11.3 have no DLA",
     "gain": "1.24-1.47x images/s on two DLAs in NVIDIA's DLA-SW tables",
     "sources": ["NVIDIA DLA-SW FAQ (C > 64)", "NVIDIA DLA-SW README: sparse INT8 figures; the guide's restrictions 'may not apply "
                 "anymore to most recent DLA releases'", "TensorRT developer guide: Customizing DLA Memory Pools and Structured "
                 "Sparsity (K % 64, not re-read)"]},
    {"engine": "host", "platforms": "ONNX Runtime on a CPU", "layers": "none", "gain": "none: no sparse convolution kernels",
     "sources": ["ONNX Runtime CPU execution provider operator kernels"]},
)  # fmt: skip


def sparse_24(weight: np.ndarray, bias: np.ndarray | None, hessian: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """A convolution's weights [O, C, kh, kw] made 2:4 sparse along C (C % 4 == 0), the error compensated on the
    weights not yet visited and on the bias; `hessian` is the augmented input Hessian [C*kh*kw+1, same]."""
    o, c, kh, kw = weight.shape
    if c % 4:
        raise ValueError(f"2:4 sparsity needs input channels in fours, not {c}")
    taps = kh * kw
    order = np.array([ch * taps + t for t in range(taps) for ch in range(c)] + [c * taps])  # taps outer, C inner, bias last
    w = np.hstack([weight.reshape(o, -1), (np.zeros((o, 1)) if bias is None else bias.reshape(-1, 1))]).astype(np.float64)[:, order]
    h = hessian[np.ix_(order, order)].astype(np.float64)
    h = h + DAMPING * 100 * max(float(np.mean(np.diag(h))), 1e-12) * np.eye(len(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: H^-1 = U^T U
    columns = c * taps
    for start in range(0, columns, 4):
        block = slice(start, start + 4)
        saliency = w[:, block] ** 2 / np.diag(u)[block] ** 2
        drop = np.argsort(saliency, axis=1, kind="stable")[:, :2]
        mask = np.ones((o, 4), bool)
        np.put_along_axis(mask, drop, False, axis=1)
        for j in range(4):
            i = start + j
            kept = np.where(mask[:, j], w[:, i], 0.0)
            error = (w[:, i] - kept) / u[i, i]
            w[:, i + 1 :] -= np.outer(error, u[i, i + 1 :])
            w[:, i] = kept
    back = np.empty_like(w)
    back[:, order] = w
    new_bias = back[:, -1].astype(np.float32) if bias is not None or np.any(back[:, -1]) else None
    return back[:, :-1].reshape(weight.shape).astype(np.float32), new_bias


def is_24(weight: np.ndarray) -> bool:
    """Exactly two zeros in every four consecutive input channels at every tap and output."""
    o, c, kh, kw = weight.shape
    groups = np.moveaxis(weight, 1, -1).reshape(o, kh, kw, c // 4, 4)
    return bool(np.all(np.sum(groups == 0, axis=-1) == 2))


def eligible(layers, engine: str) -> list[str]:
    """The prepared model's layers where the engine can use 2:4 weights (tools/perf's rule), C in fours."""
    from tools.perf.engines import sparse_candidate

    return [layer.name for layer in layers.layers if sparse_candidate(layer, engine) and layer.channels[0] % 4 == 0 and layer.op == "Conv"]


def candidates(context, found, calibration, layers, channels, plans, pruner) -> list:
    """One 2:4 candidate per plan, from its best reconstruction, on a module whose GPU or DLA uses sparse weights."""
    if context.platform == "host":
        context.notes.append("2:4 sparsity: no candidate for this CPU (ONNX Runtime has no sparse kernels; no CPU gain is claimed)")
        return []
    from tools.optimize.candidate import Candidate, metadata
    from tools.optimize.graph import Graph
    from tools.optimize.statistics import Probe, input_hessians
    from tools.perf.layers import layers_of
    from tools.perf.platforms import machine
    from tools.perf.predict import predict_device

    target = machine(context.platform)
    precision = {"int8": "int8"}.get(context.precision, "fp16")
    engine = "dla" if context.precision == "int8" and target.dla is not None and context.pipeline.spec.model.dla is not None else "gpu"
    made = []
    best = {}
    for candidate in found:
        if candidate.method in ("reconstruct+fskd", "reconstruct") and (candidate.saving not in best or candidate.method == "reconstruct+fskd"):
            best[candidate.saving] = candidate
    for saving, source in sorted(best.items()):
        model_layers = layers_of(source.model, "")
        names = eligible(model_layers, engine)
        if not names:
            context.notes.append(f"2:4 sparsity: no eligible layer on {context.platform}'s {engine.upper()} (see the rule table)")
            return []
        graph = Graph(source.model)
        nodes = {n.name: n for n in graph.nodes}
        probes = [Probe(name, nodes[name].input[0], graph.conv(nodes[name])) for name in names if name in nodes]
        hessians = input_hessians(graph, probes, calibration, context.pipeline.spec.model.threads)
        for probe in probes:
            info = probe.info
            bias = graph.weights[info.bias] if info.bias else None
            weight, new_bias = sparse_24(graph.weights[info.weight], bias, hessians[probe.node])
            graph.set_weight(info.weight, weight)
            if info.bias and new_bias is not None:
                graph.set_weight(info.bias, new_bias)
        sparse = Candidate(f"{source.method}+2:4@{saving:.0%}", f"{source.method}+2:4", saving, None)
        sparse.sparse_layers = [p.node for p in probes]
        sparse.errors = dict(source.errors)
        sparse.model = graph.to_model(metadata(sparse))
        sparse.counts = dict(source.counts)
        sparse.predicted_ms = predict_device(layers_of(sparse.model, ""), target, precision, sparse=True).total_ms
        made.append(sparse)
    return made
