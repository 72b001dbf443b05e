"""Each external tool the tests rely on works on this machine, checked with tiny inputs.

If one of these fails, the setup is broken (see build.sh), not kernelgen.
"""

from __future__ import annotations

import struct

import pytest

import tools
from browser_util import is_local, local_page
from tools import ptxas_check, tint_validate, wgsl_validate

# --- wgpu on lavapipe ---

DOUBLE_WGSL = """
@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&data)) {
        data[id.x] = data[id.x] * 2.0 + 1.0;
    }
}
"""


def test_wgpu_runs_a_compute_shader(wgpu_device):
    import wgpu

    values = [float(i) for i in range(100)]
    buffer = wgpu_device.create_buffer_with_data(
        data=struct.pack(f"{len(values)}f", *values),
        usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC,
    )
    module = wgpu_device.create_shader_module(code=DOUBLE_WGSL)
    pipeline = wgpu_device.create_compute_pipeline(
        layout="auto", compute={"module": module, "entry_point": "main"}
    )
    bind_group = wgpu_device.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[{"binding": 0, "resource": {"buffer": buffer}}],
    )
    encoder = wgpu_device.create_command_encoder()
    compute_pass = encoder.begin_compute_pass()
    compute_pass.set_pipeline(pipeline)
    compute_pass.set_bind_group(0, bind_group)
    compute_pass.dispatch_workgroups(2)
    compute_pass.end()
    wgpu_device.queue.submit([encoder.finish()])
    result = struct.unpack(f"{len(values)}f", wgpu_device.queue.read_buffer(buffer))
    assert list(result) == [v * 2 + 1 for v in values]


def test_wgpu_adapter_is_lavapipe_with_shader_f16(wgpu_adapter, wgpu_device):
    assert wgpu_adapter.info["adapter_type"] == "CPU"
    assert "shader-f16" in wgpu_adapter.features
    assert "shader-f16" in wgpu_device.features
    wgsl_validate("enable f16;\n@compute @workgroup_size(1) fn main() { let x: f16 = 1.5h; }")


def test_wgsl_validate_reports_line_and_message():
    with pytest.raises(AssertionError, match=r"wgsl:2:9"):
        wgsl_validate("fn f() {\n    let x: i32 = 1.5;\n}")


def test_wgsl_validate_with_entry_point_checks_workgroup_size():
    source = "@compute @workgroup_size(2048) fn main() {}"
    wgsl_validate(source)  # the module alone is valid
    with pytest.raises(AssertionError, match="wgpu rejected"):
        wgsl_validate(source, entry_point="main")


def test_tint_validates_wgsl():
    tint_validate(DOUBLE_WGSL, entry_point="main")
    tint_validate("enable f16;\n@compute @workgroup_size(1) fn main() { let x: f16 = 1.5h; }")
    with pytest.raises(AssertionError, match=r"2:18 cannot convert value of type 'abstract-float'"):
        tint_validate("fn f() {\n    let x: i32 = 1.5;\n}")
    with pytest.raises(AssertionError, match="exceeds the maximum allowed"):
        tint_validate("@compute @workgroup_size(2048) fn main() {}", entry_point="main")


# --- ptxas 12.9 and 13.x ---

ADD_ONE_PTX = """
.version {version}
.target {arch}
.address_size 64

.visible .entry add_one(.param .u64 data)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<3>;
    ld.param.u64 %rd1, [data];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd2, %rd2, %rd3;
    ld.global.f32 %f1, [%rd2];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd2], %f2;
    ret;
}}
"""

# add.f32 on an undeclared register
BROKEN_PTX = ADD_ONE_PTX.replace("add.f32 %f2, %f1,", "add.f32 %f2, %f7,")


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"])
def test_ptxas12_assembles(arch):
    assert "12.9" in _ptxas_version(tools.ptxas12())
    ptxas_check(ADD_ONE_PTX.format(version="7.8", arch=arch), arch, which="12")


@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_120"])
def test_ptxas13_assembles(arch):
    assert "release 13." in _ptxas_version(tools.ptxas13())
    ptxas_check(ADD_ONE_PTX.format(version="8.7", arch=arch), arch, which="13")


@pytest.mark.parametrize("which, arch", [("12", "sm_80"), ("13", "sm_100")])
def test_ptxas_rejects_broken_ptx(which, arch):
    with pytest.raises(AssertionError, match=r"line 17; error"):
        ptxas_check(BROKEN_PTX.format(version="8.7" if which == "13" else "7.8", arch=arch),
                    arch, which=which)


def test_ptxas_check_picks_the_version_by_arch():
    ptxas_check(ADD_ONE_PTX.format(version="7.8", arch="sm_86"), "86")
    ptxas_check(ADD_ONE_PTX.format(version="8.7", arch="sm_120"), "sm_120")


def _ptxas_version(path: str) -> str:
    import subprocess

    return subprocess.run([path, "--version"], capture_output=True, text=True).stdout


# --- Chromium through Playwright ---

REQUEST_ADAPTER_JS = """async () => {
    if (!navigator.gpu) return null;
    const adapter = await navigator.gpu.requestAdapter();
    return adapter && {features: [...adapter.features],
                       invocations: adapter.limits.maxComputeInvocationsPerWorkgroup};
}"""


def test_chromium_has_webgpu_with_flag(chromium, serve, tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><title>ok</title>")
    server = serve(tmp_path)
    with local_page(chromium) as page:
        page.goto(server.url("index.html"))
        adapter = page.evaluate(REQUEST_ADAPTER_JS)
    assert adapter is not None, "navigator.gpu.requestAdapter() returned null"
    assert adapter["invocations"] >= 256


def test_chromium_has_no_adapter_without_flag(chromium_no_webgpu, serve, tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><title>ok</title>")
    server = serve(tmp_path)
    with local_page(chromium_no_webgpu) as page:
        page.goto(server.url("index.html"))
        assert page.evaluate(REQUEST_ADAPTER_JS) is None


def test_local_page_blocks_and_reports_outside_hosts(chromium, serve, tmp_path):
    (tmp_path / "index.html").write_text(
        '<!doctype html><script src="http://example.com/x.js"></script>'
    )
    server = serve(tmp_path)
    with pytest.raises(AssertionError, match="example.com"):
        with local_page(chromium) as page:
            page.goto(server.url("index.html"))
    assert is_local(server.url("x")) and not is_local("http://localhost:1/")


# --- Pyodide from node_modules, in Chromium ---

BOOT_PYODIDE_JS = """async () => {
    const { loadPyodide } = await import('/pyodide/pyodide.mjs');
    const pyodide = await loadPyodide({ indexURL: '/pyodide/' });
    return pyodide.runPython('import sys; f"{sys.version_info[0]}.{sys.version_info[1]} {6 * 7}"');
}"""


def test_pyodide_boots_from_local_files(chromium, serve, tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><title>pyodide</title>")
    server = serve(tmp_path, mounts={"/pyodide/": tools.pyodide_dir()})
    with local_page(chromium) as page:
        page.goto(server.url("index.html"))
        version, answer = page.evaluate(BOOT_PYODIDE_JS).split()
    assert answer == "42"
    assert version.startswith("3.")
