"""`sdk optimize`: make a prepared model fit its budget without training.

On the prepared ONNX graph, with numpy and the calibration frames the SDK already draws:
- `channels`: which output channels of which convolutions can go, coupled channels tied together;
- `statistics` and `reconstruct`: each consumer's input Hessian from the calibration frames, the channels to remove
  chosen by their effect on the next layer's output (greedy, least squares), the next layer refitted;
- `allocate`: how many channels per layer, by predicted time saved on the target per unit of reconstruction error;
- `fskd`: few-sample distillation, a 1x1 correction per block fitted against the original model and folded;
- `sparsity`: 2:4 weights with layer-wise error compensation, on the layers the target can use it (`sparse_rules`);
- `candidates`, `measure`, `report`, `command`: the candidates, the accuracy gate, the timings and the front.
"""
