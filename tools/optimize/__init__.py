"""`sdk optimize`: make a prepared model fit its budget without training.

On the prepared ONNX graph, with numpy and the calibration frames the SDK already draws:
- `graph`, `channels`: the graph as arrays; which output channels can go, coupled channels tied together;
- `statistics`, `reconstruct`: each consumer's input Hessian, the channels to remove chosen by their effect on the next
  layer's output (greedy, least squares), the next layer refitted;
- `allocate`: how many channels per layer, by predicted time saved on the target per unit of reconstruction error;
- `pruning`, `prune`, `sweep`: pruned graphs for a plan, and the pass against the original (teacher) model that refits
  each pruned layer and fits the few-sample distillation (FSKD) correction folded into the preceding convolution;
- `sparsity`: 2:4 weights with layer-wise error compensation, on the layers the target can use it (`RULES`);
- `run`, `candidate`, `measure`, `report`, `outputs`, `command`: the candidates, the accuracy gate, the timings, the front, the files.
"""
