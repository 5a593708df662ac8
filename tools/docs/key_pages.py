"""pipeline.md and target-file.md: every key of a pipeline or target file, walked from its pydantic JSON schema."""

from __future__ import annotations

import json
import re

from tools.docs.header import HEADER, REGENERATE
from tools.docs.meanings import MEANINGS, TARGET_MEANINGS


def _plural(kind: str) -> str:
    """`number` -> `numbers`; a kind already plural (`list of 2 numbers`) stays as it is."""
    return kind if kind.endswith("s") else f"{kind}s"


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{value:,}".replace(",", " ") if isinstance(value, int) and abs(value) >= 100_000 else str(value)


class SchemaWalker:
    """Rows of (key, type, default, allowed, meaning) for every key of a JSON schema, depth first, in schema order."""

    def __init__(self, schema: dict, meanings: dict[str, str]) -> None:
        self.meanings = meanings
        self.defs = schema.get("$defs", {})
        self.root = schema
        self.rows: list[dict[str, str]] = []

    def resolve(self, node: dict) -> dict:
        while "$ref" in node:
            extra = {k: v for k, v in node.items() if k != "$ref"}
            node = {**self.defs[node["$ref"].split("/")[-1]], **extra}
        return node

    def split_nullable(self, node: dict) -> tuple[dict, bool]:
        """The non-null branch of `X | None` (merged with the outer keys), and whether null is allowed."""
        node = self.resolve(node)
        branches = node.get("anyOf")
        if not branches:
            return node, False
        rest = [b for b in branches if b.get("type") != "null"]
        nullable = len(rest) < len(branches)
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        if len(rest) == 1:
            return {**self.resolve(rest[0]), **outer}, nullable
        return {**outer, "anyOf": rest}, nullable

    def type_of(self, node: dict) -> str:
        if "const" in node:
            return f"`{json.dumps(node['const'])}`"
        if "enum" in node:
            return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
        if "oneOf" in node:
            kinds = list(node.get("discriminator", {}).get("mapping", {}))
            return "mapping, by `kind`: " + ", ".join(f"`{k}`" for k in kinds)
        if "anyOf" in node:  # a value of one of several types (a tensor name or a mapping)
            return " or ".join(self.type_of(self.resolve(branch)) for branch in node["anyOf"])
        kind = node.get("type")
        if kind == "array":
            if "prefixItems" in node:
                items = [self.split_nullable(i)[0] for i in node["prefixItems"]]
                return f"list of {len(items)} {_plural(self.type_of(items[0]))}"
            items, _ = self.split_nullable(node.get("items", {}))
            if "oneOf" in items:
                return "list of mappings, by `kind`: " + ", ".join(f"`{k}`" for k in items.get("discriminator", {}).get("mapping", {}))
            return f"list of {_plural(self.type_of(items))}"
        if kind == "object":
            if "properties" in node:
                return "mapping"
            values = node.get("additionalProperties")
            if isinstance(values, dict):
                values, _ = self.split_nullable(values)
                return f"mapping of name to {self.type_of(values)}"
            return "mapping"
        return {"integer": "integer", "number": "number", "boolean": "boolean", "string": "string"}.get(kind, "any")

    @staticmethod
    def range_of(node: dict) -> str:
        low = high = None
        if "minimum" in node:
            low = f"≥ {_number(node['minimum'])}"
        if "exclusiveMinimum" in node:
            low = f"> {_number(node['exclusiveMinimum'])}"
        if "maximum" in node:
            high = f"≤ {_number(node['maximum'])}"
        if "exclusiveMaximum" in node:
            high = f"< {_number(node['exclusiveMaximum'])}"
        if low and high and low.startswith("≥") and high.startswith("≤"):
            return f"{low[2:]} to {high[2:]}"
        return ", ".join(p for p in (low, high) if p)

    def allowed_of(self, node: dict, nullable: bool) -> str:
        parts = []
        if node.get("type") == "array":
            if "prefixItems" in node:
                first = self.split_nullable(node["prefixItems"][0])[0]
                if self.range_of(first):
                    parts.append(f"each {self.range_of(first)}")
            else:
                items = self.split_nullable(node.get("items", {}))[0]
                if self.range_of(items):
                    parts.append(f"each {self.range_of(items)}")
                if "minItems" in node:
                    parts.append(f"at least {node['minItems']}")
                if "maxItems" in node:
                    parts.append(f"at most {node['maxItems']} items")
        elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            names = node.get("propertyNames", {}).get("enum")
            if names:
                parts.append("names: " + ", ".join(f"`{n}`" for n in names))
            values = self.split_nullable(node["additionalProperties"])[0]
            if values.get("type") == "array":
                items = self.split_nullable(values.get("items", {}))[0]
                if self.range_of(items):
                    parts.append(f"each number {self.range_of(items)}")
                if "maxItems" in values:
                    what = "dimensions" if items.get("type") == "integer" else "items each"
                    parts.append(f"at most {values['maxItems']} {what}")
        else:
            if self.range_of(node):
                parts.append(self.range_of(node))
            if "pattern" in node:
                parts.append(f"matches `{node['pattern']}`")
            if "minLength" in node and node.get("minLength") == node.get("maxLength"):
                parts.append(f"{node['minLength']} characters")
        if nullable:
            parts.append("or `null`")
        return "; ".join(parts)

    @staticmethod
    def default_of(prop: dict, required: bool) -> str:
        if required:
            return "required"
        if "default" not in prop:
            return ""
        default = prop["default"]
        if isinstance(default, dict):
            return "see below" if default else "`{}`"
        return f"`{json.dumps(default)}`"

    def meaning_of(self, path: str, prop: dict, node: dict) -> str:
        text = prop.get("description") or node.get("description")
        if not text and node.get("prefixItems"):
            text = self.split_nullable(node["prefixItems"][0])[0].get("description")
        if not text:
            text = self.meanings.get(path.replace("<stage>.", ""), "")
        return " ".join(str(text).split())

    def add(self, path: str, prop: dict, required: bool, variant: str | None = None) -> None:
        node, nullable = self.split_nullable(prop)
        meaning = self.meaning_of(path, prop, node)
        if variant:
            meaning = f"(`kind: {variant}`) {meaning}".strip()
        self.rows.append(
            {
                "key": path,
                "type": self.type_of(node),
                "default": self.default_of(prop, required),
                "allowed": self.allowed_of(node, nullable),
                "meaning": meaning,
            }
        )
        self.children(path, node, variant)

    def children(self, path: str, node: dict, variant: str | None) -> None:
        if "properties" in node:
            self.properties(path, node)
        elif "oneOf" in node:
            self.variants(path, node)
        elif "anyOf" in node:
            for branch in (self.resolve(b) for b in node["anyOf"]):
                if "properties" in branch:
                    self.properties(path, branch, variant)
        elif node.get("type") == "array" and "prefixItems" not in node:
            items = self.split_nullable(node.get("items", {}))[0]
            if "oneOf" in items:
                self.variants(f"{path}[]", items)
            elif "properties" in items:
                self.properties(f"{path}[]", items)
        elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            values = self.split_nullable(node["additionalProperties"])[0]
            if "properties" in values:
                self.properties(f"{path}.<stage>" if "propertyNames" in node else f"{path}.<name>", values)

    def properties(self, path: str, node: dict, variant: str | None = None) -> None:
        required = set(node.get("required", ()))
        for name, prop in node["properties"].items():
            self.add(f"{path}.{name}" if path else name, prop, name in required, variant)

    def variants(self, path: str, node: dict) -> None:
        seen: set[str] = set()
        for kind, ref in node["discriminator"]["mapping"].items():
            model = self.resolve({"$ref": ref})
            required = set(model.get("required", ()))
            for name, prop in model["properties"].items():
                key = f"{path}.{name}"
                if name == "kind":
                    if key in seen:
                        continue
                    seen.add(key)
                    self.rows.append(
                        {
                            "key": key,
                            "type": "one of " + ", ".join(f"`{k}`" for k in node["discriminator"]["mapping"]),
                            "default": "required",
                            "allowed": "",
                            "meaning": self.meaning_of(key, {}, {}),
                        }
                    )
                    continue
                self.add(key, prop, name in required, kind)


def pipeline_keys() -> list[dict[str, str]]:
    from sdk.spec.schema import Pipeline

    walker = SchemaWalker(Pipeline.model_json_schema(), MEANINGS)
    walker.properties("", walker.root)
    return walker.rows


def target_keys() -> list[dict[str, str]]:
    from tools.targets.spec import TargetSpec

    walker = SchemaWalker(TargetSpec.model_json_schema(), TARGET_MEANINGS)
    walker.properties("", walker.root)
    return walker.rows


COLUMNS = ("key", "type", "default", "allowed", "meaning")


def _key_table(selected: list[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |\n| " + " | ".join("---" for _ in COLUMNS) + " |\n"]
    for row in selected:
        cells = [_key(row["key"]), *(cell(row[c]) for c in COLUMNS[1:])]
        lines.append("| " + " | ".join(cells) + " |\n")
    return "".join(lines) + "\n"


def _key(key: str) -> str:
    """A key name that a narrow table column breaks after a dot, never inside a word (docs/stylesheets/extra.css)."""
    from html import escape

    return '<code class="key">' + ".<wbr>".join(escape(part) for part in key.split(".")) + "</code>"


def cell(text: str) -> str:
    """Text for a table cell: a pipe is escaped, and split out of code spans (where an escape would show)."""
    parts = re.split(r"(`[^`]*`)", text.replace("\n", " "))
    return "".join(part.replace("|", "`\\|`") if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def pipeline_reference() -> str:
    from sdk.spec.schema import Pipeline

    schema = Pipeline.model_json_schema()
    rows = pipeline_keys()
    top = list(schema["properties"])
    out = [
        HEADER.format(command=REGENERATE, source="the pydantic models in `sdk/spec/` (`Pipeline.model_json_schema()`)"),
        "# Pipeline file reference\n\n",
        "Every key of a pipeline file (`version: 1`). A file is read with YAML's safe rules only (no tags), at most "
        "256 KiB, duplicate keys refused; every path is relative to the pipeline file's folder and may not leave it. "
        'Unknown keys are errors with a "did you mean". An error names the file, line, YAML path, the bad value and '
        "what is allowed. `sinks[]` is an item of the `sinks` list; `<stage>` is one of the stage names. "
        "The example, with every key commented: `pipelines/pedestrian.yaml`.\n\n",
    ]

    def inside(section: str) -> list[dict[str, str]]:
        return [r for r in rows if r["key"].startswith((section + ".", section + "[]"))]

    out.append("Sections: " + ", ".join(f"[`{k}`](#{k})" for k in top if inside(k)) + ".\n\n")
    out.append("## Top level\n\n")
    out.append(_key_table([r for r in rows if "." not in r["key"] and "[" not in r["key"]]))
    for section in top:
        if inside(section):
            out.append(f"## {section}\n\n")
            out.append(_key_table(inside(section)))
    return "".join(out)


def target_reference() -> str:
    from tools.targets.spec import PLATFORMS

    return "".join(
        [
            HEADER.format(command=REGENERATE, source="`tools/targets/spec.py` (`TargetSpec.model_json_schema()`)"),
            "# Target file reference\n\n",
            "One file per device, `targets/NAME.yaml` (or in `$SDK_TARGETS_DIR`), used as `--target NAME`. `local` is built in "
            "and needs no file. Groups of targets: `targets/groups.yaml`, e.g. `vehicles: [orin-01, orin-02]`. The values that "
            "reach remote command lines (host, user, remote root, python) are allow-listed by the patterns below and quoted as "
            "well. Platforms: " + ", ".join(f"`{p}`" for p in PLATFORMS) + ". A step-by-step example: "
            "[deploy to a Jetson](../guides/jetson.md).\n\n",
            _key_table(target_keys()),
        ]
    )


# ---------------------------------------------------------------- the command line


__all__ = ["cell", "pipeline_keys", "pipeline_reference", "target_keys", "target_reference"]
