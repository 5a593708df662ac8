"""Pipeline files: valid ones load into frozen objects; each kind of bad file gets its own clear error."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pydantic
import pytest

from sdk.errors import ConfigError
from sdk.spec import load_pipeline

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TEXT = (REPO / "pipelines" / "pedestrian.yaml").read_text()


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    for name in ("vtest.avi", "ssdlite_pedestrian.onnx"):
        (tmp_path / "assets" / name).write_bytes(b"stand-in: the loader only checks that files exist")
    return tmp_path


def write(folder: Path, text: str, name: str = "p.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    return info.value.message


def test_example_loads_into_frozen_typed_objects():
    pipeline = load_pipeline(REPO / "pipelines" / "pedestrian.yaml")
    spec = pipeline.spec
    assert spec.preprocess.resize.coordinates == "asymmetric"
    assert spec.preprocess.tensor_shape == (1, 3, 300, 300)
    assert spec.postprocess.decoder.kind == "ssd"
    assert spec.budgets.stages["infer"].p99_ms == 40.0
    with pytest.raises(pydantic.ValidationError):
        spec.preprocess.resize.width = 10  # frozen


def test_unknown_key_suggests_the_close_one(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("  threads: 2", "  thraeds: 2")))
    assert "p.yaml:" in message and "model.thraeds" in message
    assert "did you mean 'threads'?" in message
    assert "allowed here: path, prepare, backend, threads" in message


def test_unknown_key_inside_a_tagged_union_names_the_yaml_path(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("anchor_layout: yxyx", "anchor_layot: yxyx")))
    assert "postprocess.decoder.anchor_layot" in message and "did you mean 'anchor_layout'?" in message


def test_wrong_type_names_path_line_and_value(folder):
    path = write(folder, EXAMPLE_TEXT.replace("threads: 2", "threads: many"))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "threads: many" in text)
    message = error_of(path)
    assert f"p.yaml:{line}: model.threads" in message and "'many'" in message and "integer" in message


def test_bad_choice_lists_the_allowed_values(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("mode: stretch", "mode: strech")))
    assert "preprocess.resize.mode" in message and "'stretch' or 'letterbox'" in message and "did you mean 'stretch'?" in message


def test_unknown_stage_in_budgets(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("infer: {p99_ms: 40.0}", "inference: {p99_ms: 40.0}")))
    assert "budgets.stages.inference" in message and "did you mean 'infer'?" in message


def test_missing_required_key(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("  classes: [person]\n", "")))
    assert "postprocess.classes: required key is missing" in message


def test_missing_model_file(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("assets/ssdlite_pedestrian.onnx", "assets/missing.onnx")))
    assert "model.path" in message and "missing.onnx does not exist" in message


@pytest.mark.parametrize("bad", ["../outside.onnx", "assets/../../outside.onnx", "/etc/passwd"])
def test_paths_escaping_the_folder_are_refused(folder, bad):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("assets/ssdlite_pedestrian.onnx", bad)))
    assert "model.path" in message and ("leaves the folder" in message or "absolute path" in message)


def test_symlink_escaping_the_folder_is_refused(folder, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "model.onnx"
    outside.write_bytes(b"x")
    (folder / "assets" / "link.onnx").symlink_to(outside)
    message = error_of(write(folder, EXAMPLE_TEXT.replace("assets/ssdlite_pedestrian.onnx", "assets/link.onnx")))
    assert "leaves the folder" in message


def test_a_source_files_query_is_no_part_of_its_file(folder):
    pipeline = load_pipeline(write(folder, EXAMPLE_TEXT.replace("file://assets/vtest.avi", "file://assets/vtest.avi?format=nv12")))
    assert pipeline.source_file() == folder / "assets" / "vtest.avi"  # checked, and shipped with a release, as the file itself
    message = error_of(write(folder, EXAMPLE_TEXT.replace("file://assets/vtest.avi", "file://assets/other.avi?format=nv12")))
    assert "source.uri" in message and "other.avi does not exist" in message


def test_source_path_escaping_the_folder_is_refused(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("file://assets/vtest.avi", "file://../vtest.avi")))
    assert "source.uri" in message and "leaves the folder" in message


def test_python_tag_is_refused_and_never_executed(folder, tmp_path):
    marker = tmp_path / "pwned"
    text = EXAMPLE_TEXT.replace("name: pedestrian", f"name: !!python/object/apply:os.system ['touch {marker}']")
    message = error_of(write(folder, text))
    assert "python/object/apply" in message
    assert not marker.exists()


def test_duplicate_key_is_refused_with_both_lines(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("name: pedestrian", "name: pedestrian\nname: other")))
    assert "duplicate key 'name'" in message and "first at line" in message


def test_nested_duplicate_key(folder):
    text = EXAMPLE_TEXT.replace("  color: rgb\n", "  color: rgb\n  color: bgr\n")
    assert "preprocess.color: duplicate key 'color'" in error_of(write(folder, text))


def test_huge_file_is_refused_before_parsing(folder):
    message = error_of(write(folder, EXAMPLE_TEXT + "#" + "x" * 300_000))
    assert "at most 262144 bytes" in message


def test_alias_bomb_is_refused(folder):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    assert "YAML nodes" in error_of(write(folder, bomb))


def test_empty_and_non_mapping_files(folder):
    assert "empty" in error_of(write(folder, ""))
    assert "must be a mapping" in error_of(write(folder, "- a\n- b\n"))


def test_invalid_yaml_names_the_line(folder):
    assert re.search(r"p\.yaml:3: invalid YAML: expected ',' or ']'", error_of(write(folder, "version: 1\nname: [unclosed\n")))


def test_cross_field_check_prepare_shape_matches_preprocess(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("[1, 3, 300, 300]", "[1, 3, 320, 320]")))
    assert "[1, 3, 320, 320]" in message and "[1, 3, 300, 300]" in message


def test_uint8_input_refuses_normalisation(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("dtype: float32", "dtype: uint8")))
    assert "uint8" in message and "normalize" in message


def test_unknown_source_scheme(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("file://assets/vtest.avi", "rtsp://cam/1")))
    assert "source.uri" in message and "synthetic://" in message


def test_files_unchecked_on_device_but_still_confined(folder):
    text = EXAMPLE_TEXT.replace("assets/ssdlite_pedestrian.onnx", "assets/not-shipped.onnx")
    assert load_pipeline(write(folder, text), check_files=False).spec.model.path == "assets/not-shipped.onnx"
    shutil.rmtree(folder / "assets")
    with pytest.raises(ConfigError):
        load_pipeline(write(folder, EXAMPLE_TEXT.replace("assets/ssdlite_pedestrian.onnx", "../x.onnx")), check_files=False)


def test_a_misspelled_required_key_is_named_with_its_suggestion_not_only_as_missing(folder):
    message = error_of(write(folder, EXAMPLE_TEXT.replace("\nsource:", "\nsorce:", 1)))
    assert ": sorce: unknown key 'sorce'; did you mean 'source'? ('source' is required and missing) allowed here: " in message
    assert "required key is missing" not in message


def test_a_recall_budget_on_a_class_the_model_lacks_is_one_error_with_the_close_name(folder):
    budget = "  accuracy: {min_recall: 0.95, min_precision: 0.95, min_recall_at_precision: {persn: 0.8}}"
    path = write(folder, EXAMPLE_TEXT.replace("  accuracy: {min_recall: 0.95, min_precision: 0.95}", budget))
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    message = info.value.message
    assert "p.yaml:" in message and "budgets.accuracy.min_recall_at_precision.persn" in message and "\n" not in message
    assert "'persn' is not a class of the model; did you mean 'person'? allowed: person" in message
    assert info.value.hint and "class names" in info.value.hint
    original = "  accuracy: {min_recall: 0.95, min_precision: 0.95}"
    fixed = load_pipeline(write(folder, EXAMPLE_TEXT.replace(original, budget.replace("persn", "person"))))
    assert fixed.spec.budgets.accuracy.label_minimums() == [("min_recall_at_precision.person", 0.8)]
