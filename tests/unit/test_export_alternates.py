"""export/alternates.py: a default webgpu export carries a kernel's subgroups form where it differs
from the plain one (its `subgroups` field, manifest.optional_features); subgroups=False writes the
plain forms only and subgroups=True kernels that need the feature; the plain forms are the
kernels of subgroups=False, byte for byte; a damaged form is a ManifestError naming it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.errors import ManifestError, PathError
from tools import wgpu_device


def _conv():
  """A 3x3 convolution: on SwiftShader's tile table its weight loads are shared per quad."""
  x = kg.Tensor.empty(1, 8, 16, 16, name="x")
  w = kg.Tensor.randn(16, 8, 3, 3, seed=1).realize()
  return {"y": x.conv2d(w, padding=1).relu()}


def _manifest(path) -> dict:
  return json.loads((path / "manifest.json").read_text())


def _files(path) -> dict:
  return {p.name: p.read_text() for p in path.glob("*.wgsl")}


def test_default_export_carries_subgroup_forms(tmp_path):
  kg.export(_conv(), str(tmp_path / "auto"), adapter="swiftshader")
  kg.export(_conv(), str(tmp_path / "plain"), adapter="swiftshader", subgroups=False)
  auto, plain = _manifest(tmp_path / "auto"), _manifest(tmp_path / "plain")
  assert auto["optional_features"] == ["subgroups"] and auto["features"] == []
  assert "optional_features" not in plain
  assert not any("subgroups" in k for k in plain["kernels"])
  (kernel,) = [k for k in auto["kernels"] if "subgroups" in k]
  form = kernel["subgroups"]
  assert form["file"] == kernel["name"] + "_sg.wgsl" and form["features"] == ["subgroups"]
  assert "quadBroadcast" in (tmp_path / "auto" / form["file"]).read_text()
  # the plain forms are subgroups=False's: the same entries and files, but for the forms
  assert [{k: v for k, v in e.items() if k != "subgroups"} for e in auto["kernels"]] == \
    plain["kernels"]
  files = _files(tmp_path / "auto")
  assert {n: s for n, s in files.items() if n != form["file"]} == _files(tmp_path / "plain")


def test_subgroups_true_keeps_its_meaning(tmp_path):
  kg.export(_conv(), str(tmp_path), adapter="swiftshader", subgroups=True)
  manifest = _manifest(tmp_path)
  assert manifest["features"] == ["subgroups"] and "optional_features" not in manifest
  assert not any("subgroups" in k for k in manifest["kernels"])


def test_ptx_bundles_have_no_forms(tmp_path):
  kg.export(_conv(), str(tmp_path), format="ptx")
  manifest = _manifest(tmp_path)
  assert "optional_features" not in manifest
  assert not any("subgroups" in k for k in manifest["kernels"])


def test_bundle_with_forms_runs_on_wgpu_like_numpy(tmp_path):
  wgpu_device()                   # lavapipe: fails under KERNELGEN_REQUIRE_ALL=1 if missing
  x = kg.Tensor.empty(1, 8, 16, 16, name="x")
  w = kg.Tensor.randn(16, 8, 3, 3, seed=1).realize()
  bundle = kg.export({"y": x.conv2d(w, padding=1)}, str(tmp_path), adapter="swiftshader")
  assert any("subgroups" in k for k in bundle.manifest["kernels"])
  xv = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)
  padded = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  want = np.einsum("ncijkl,ockl->noij", windows, w.numpy())
  got = bundle.run({"x": xv}, device="WEBGPU")["y"].numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change,field", [
  (lambda f: f.update(workgroup_size=[0, 1, 1]), "kernels[0].subgroups.workgroup_size[0]"),
  (lambda f: f.update(bindings=[]), "kernels[0].subgroups"),
  (lambda f: f.update(features="subgroups"), "kernels[0].subgroups.features"),
  (lambda f: f.update(variants=[{"dim": "n"}]), "kernels[0].subgroups.variants[0]"),
  (lambda f: f.clear(), "kernels[0].subgroups"),
])
def test_damaged_form_is_a_manifest_error(tmp_path, change, field):
  kg.export(_conv(), str(tmp_path), adapter="swiftshader")
  manifest = _manifest(tmp_path)
  manifest["kernels"][0], = [k for k in manifest["kernels"] if "subgroups" in k]
  change(manifest["kernels"][0]["subgroups"])
  (tmp_path / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(ManifestError) as error:
    kg.load_bundle(str(tmp_path))
  assert field in str(error.value)


def test_form_outside_the_folder_is_a_path_error(tmp_path):
  kg.export(_conv(), str(tmp_path), adapter="swiftshader")
  manifest = _manifest(tmp_path)
  at = next(i for i, k in enumerate(manifest["kernels"]) if "subgroups" in k)
  manifest["kernels"][at]["subgroups"]["file"] = "../x.wgsl"
  (tmp_path / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(PathError, match=rf"kernels\[{at}\].subgroups.file"):
    kg.load_bundle(str(tmp_path))


@pytest.mark.parametrize("value", [["subgroups", "x"], [], "subgroups"])
def test_wrong_optional_features_is_a_manifest_error(tmp_path, value):
  kg.export(_conv(), str(tmp_path), adapter="swiftshader")
  manifest = _manifest(tmp_path)
  manifest["optional_features"] = value
  (tmp_path / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(ManifestError, match="optional_features"):
    kg.load_bundle(str(tmp_path))


def test_optional_features_without_forms_is_a_manifest_error(tmp_path):
  kg.export(_conv(), str(tmp_path), adapter="swiftshader", subgroups=False)
  manifest = _manifest(tmp_path)
  manifest["optional_features"] = ["subgroups"]
  (tmp_path / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(ManifestError, match="optional_features"):
    kg.load_bundle(str(tmp_path))


def test_form_past_the_plain_forms_limits_is_dropped(tmp_path):
  """A form that would need a device limit the plain forms do not (a 512-lane workgroup) is
  dropped at export, its file too: load() makes one device for either form."""
  from kernelgen.export import alternates, device_limits
  kg.export(_conv(), str(tmp_path), adapter="swiftshader")
  manifest = _manifest(tmp_path)
  (kernel,) = [k for k in manifest["kernels"] if "subgroups" in k]
  sources = {**_files(tmp_path)}
  alternates.fit(manifest, sources, device_limits.needs, device_limits.DEFAULTS)
  assert "subgroups" in kernel and kernel["subgroups"]["file"] in sources
  kernel["subgroups"]["workgroup_size"] = [512, 1, 1]
  alternates.fit(manifest, sources, device_limits.needs, device_limits.DEFAULTS)
  assert "subgroups" not in kernel and "optional_features" not in manifest
  assert set(sources) == {k["file"] for k in manifest["kernels"]}


@pytest.mark.parametrize("runs,field", [
  ({"dim": "seq", "lo": 3, "hi": 1}, "kernels[0].runs.hi"),     # an empty range
  ({"dim": 7, "lo": 1, "hi": 1}, "kernels[0].runs.dim"),
  ({"dim": "seq", "lo": "1", "hi": 2}, "kernels[0].runs.lo"),
  ([1, 2], "kernels[0].runs"),
])
def test_damaged_runs_is_a_manifest_error(tmp_path, runs, field):
  """A kernel's `runs` (launched only while its dim is within lo..hi: graph/one_row.py's joins)
  edited into something malformed is a ManifestError naming the field, not a skipped launch."""
  kg.export(_conv(), str(tmp_path), subgroups=False)
  manifest = _manifest(tmp_path)
  manifest["kernels"][0]["runs"] = runs
  (tmp_path / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(ManifestError) as error:
    kg.load_bundle(str(tmp_path))
  assert field in str(error.value)
