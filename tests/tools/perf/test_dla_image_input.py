"""The DLA's image-input mode (decision 1140), on hand-built layers: a first convolution of up to 4 channels that
reads an input in the DLA's image format keeps the MAC slots the NVDLA's pre- and post-extension rules leave busy,
not 3 of a padded channel block; nothing else changes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tools.perf.engines import DeviceEngine, dla_image_mode, dla_image_share
from tools.perf.layers import Layer, ModelLayers
from tools.perf.platforms import machine
from tools.perf.predict import predict_device


def _conv(name: str, source: str, c_in: int, c_out: int, size: int, kernel: int, stride: int = 1, groups: int = 1,
          attrs: dict | None = None) -> Layer:  # fmt: skip
    out = (1, c_out, size // stride, size // stride)
    macs = math.prod(out) * (c_in // groups) * kernel * kernel
    return Layer(index=0, name=name, op="Conv", op_class="conv", inputs=(source,), outputs=(f"{name}_out",),
                 input_shapes=((1, c_in, size, size),), output_shapes=(out,), macs=macs, flops=2 * macs,
                 weight_elements=c_out * (c_in // groups) * kernel * kernel, input_elements=c_in * size * size,
                 output_elements=math.prod(out), channels=(c_in, c_out), kernel=(kernel, kernel), groups=groups,
                 strides=(stride, stride), attrs=attrs or {})  # fmt: skip


@pytest.mark.parametrize(
    ("c_in", "kernel", "stride", "busy"),
    [
        (3, 7, 2, 147 / 256),  # ResNet's stem: 7 x 4 = 28 elements a row, 2 rows an atomic operation, 4 operations
        (3, 3, 2, 27 / 64),  # 3 x 4 = 12 elements a row: 4 rows in one operation
        (4, 4, 1, 1.0),  # the NVDLA's own example: a 4x4x4 kernel with 4-row post-extension keeps every MAC busy
        (3, 11, 4, 363 / 704),  # 44 elements a row: no post-extension, 11 operations of 64
        (1, 3, 1, 9 / 64),  # grayscale: 1 element a pixel; 3 rows fit one operation
    ],
)
def test_the_image_modes_busy_share_follows_the_extension_rules(c_in, kernel, stride, busy):
    assert dla_image_share(_conv("c", "images", c_in, 64, 224, kernel, stride)) == pytest.approx(busy)


def test_only_a_plain_convolution_of_an_image_input_runs_in_image_mode():
    images = frozenset({"images"})
    assert dla_image_mode(_conv("c", "images", 3, 64, 224, 7, 2), images)
    assert not dla_image_mode(_conv("c", "other", 3, 64, 224, 7, 2), images)  # not a network input in the image format
    assert not dla_image_mode(_conv("c", "images", 8, 64, 224, 3), images)  # more than 4 channels: feature mode
    assert not dla_image_mode(_conv("c", "images", 4, 4, 224, 3, groups=4), images)  # grouped
    assert not dla_image_mode(_conv("c", "images", 3, 64, 224, 3, attrs={"dilations": (2, 2)}), images)  # dilation


def test_an_image_input_speeds_up_the_first_dla_convolution_only():
    target = machine("jetson-agx-orin-64gb", "MAXN")
    stem, second = _conv("stem", "images", 3, 64, 224, 7, 2), _conv("second", "stem_out", 64, 64, 112, 3)
    feature, image = DeviceEngine(target.dla, "int8"), DeviceEngine(target.dla, "int8", image_inputs=frozenset({"images"}))
    assert image.rate_gflops(stem) / feature.rate_gflops(stem) == pytest.approx((147 / 256) / (3 / 32))  # 3 of a 32-channel block
    assert image.rate_gflops(second) == feature.rate_gflops(second)
    gpu = DeviceEngine(target.gpu, "int8", image_inputs=frozenset({"images"}))
    assert gpu.rate_gflops(stem) == DeviceEngine(target.gpu, "int8").rate_gflops(stem)  # a DLA mode: the GPU ignores it

    model = ModelLayers("hand-built", (stem, second), {"images": (1, 3, 224, 224)}, ("second_out",))
    placement = SimpleNamespace(layers=[SimpleNamespace(name=n, device="DLA", subgraph=0) for n in ("stem", "second")])
    default = predict_device(model, target, "int8", placement)
    hwc4 = predict_device(model, target, "int8", placement, image_input=True)
    before, after = default.by_member(), hwc4.by_member()
    assert after["stem"].compute_ms < before["stem"].compute_ms / 5
    assert after["second"].ms == before["second"].ms
    assert hwc4.total_ms < default.total_ms


def test_an_unknown_input_format_in_the_published_table_is_refused(tmp_path):
    from sdk.errors import ConfigError
    from tools.perf.published import published_table

    path = tmp_path / "published.yaml"
    path.write_text("sources:\n  s: {title: t, url: u, input_format: nhwc}\nrows: []\n")
    with pytest.raises(ConfigError, match="input_format 'nhwc'") as caught:
        published_table(path)
    assert "dla_hwc4" in caught.value.hint
