"""FlyDSL kernels: flyautotune's hints lowered inside FlyDSL's own compile path, on the CPU.

FlyDSL traces the kernel, then calls its compile backend's
``lower_compile_hints`` before ROCDL lowering; the backend from
``flyautotune_rocm.flydsl_backend`` lowers flyautotune's snapshot there.
Without a ROCm install there is no ``ld.lld`` to link a code object, so the
test backend stops the pipeline at AMDGCN assembly.
"""

import itertools

import pytest

flyc = pytest.importorskip("flydsl.compiler")
fx = pytest.importorskip("flydsl.expr")
torch = pytest.importorskip("torch")

import flyautotune as fat  # noqa: E402
from flydsl._mlir import ir  # noqa: E402
from flydsl._mlir.passmanager import PassManager  # noqa: E402
from flydsl.compiler.kernel_function import CompilationContext  # noqa: E402

from flyautotune_rocm import kernel_isa, llvm_fn_attribute  # noqa: E402
from flyautotune_rocm.flydsl_backend import backend_class, register_flydsl_backend  # noqa: E402


@flyc.kernel
def add_kernel(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, block_dim: fx.Constexpr[int]):
    bid = fx.block_idx.x
    tid = fx.thread_idx.x
    tiles = [fx.slice(fx.logical_divide(t, fx.make_layout(block_dim, 1)), (None, bid)) for t in (A, B, C)]
    tA, tB, tC = (fx.logical_divide(t, fx.make_layout(1, 1)) for t in tiles)
    reg_ty = fx.MemRefType.get(fx.T.f32, fx.LayoutType.get(1, 1), fx.AddressSpace.Register)
    atom = fx.make_copy_atom(fx.UniversalCopy32b(), fx.Float32)
    rA, rB, rC = (fx.memref_alloca(reg_ty, fx.make_layout(1, 1)) for _ in range(3))
    fx.copy_atom_call(atom, fx.slice(tA, (None, tid)), rA)
    fx.copy_atom_call(atom, fx.slice(tB, (None, tid)), rB)
    fx.memref_store_vec(fx.arith.addf(fx.memref_load_vec(rA), fx.memref_load_vec(rB)), rC)
    fx.copy_atom_call(atom, rC, fx.slice(tC, (None, tid)))


@flyc.jit
def vector_add(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, n: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    add_kernel(A, B, C, 64).launch(grid=(n // 64, 1, 1), block=[64, 1, 1], stream=stream)


_names = itertools.count()


@pytest.fixture
def flydsl_gfx942(monkeypatch):
    """Select a recording subclass of the flyautotune FlyDSL backend for gfx942, compile-only."""

    class Recording(backend_class()):
        prepared = []

        def lower_compile_hints(self, module, *, compile_hints):
            super().lower_compile_hints(module, compile_hints=compile_hints)
            Recording.prepared.append(module.operation.get_asm())

        def pipeline_fragments(self, *, compile_hints):
            fragments = super().pipeline_fragments(compile_hints=compile_hints)
            # No ROCm toolkit (ld.lld) on this machine: stop at AMDGCN assembly.
            assert fragments[-1].startswith("gpu-module-to-binary")
            return [*fragments[:-1], "gpu-module-to-binary{format=isa}"]

    name = register_flydsl_backend(f"flyautotune-rocm-test-{next(_names)}", cls=Recording)
    monkeypatch.setenv("FLYDSL_COMPILE_BACKEND", name)
    monkeypatch.setenv("ARCH", "gfx942")
    monkeypatch.setenv("COMPILE_ONLY", "1")
    monkeypatch.setenv("FLYDSL_RUNTIME_ENABLE_CACHE", "0")
    return Recording


def compile_vector_add():
    a, b, c = (torch.zeros(256) for _ in range(3))  # CPU tensors: compile placeholders
    flyc.compile(vector_add, a, b, c, 256)


def run_flydsl_pipeline(recording, *, to_isa: bool):
    """Lower the module FlyDSL prepared (hints applied) with the backend's own pipeline.

    Returns the LLVM IR of its gpu.module (``to_isa=False``) or the AMDGCN text.
    """
    from flydsl._mlir._mlir_libs._mlirDialectsLLVM import translate_module_to_llvmir
    from flydsl._mlir.dialects import gpu
    from flydsl.compiler.backends import get_backend

    fragments = get_backend().pipeline_fragments(compile_hints={})
    if not to_isa:
        fragments = fragments[:-1]
    with ir.Context() as ctx:
        ctx.load_all_available_dialects()
        module = ir.Module.parse(recording.prepared[-1])
        PassManager.parse(f"builtin.module({','.join(fragments)})").run(module.operation)
        if not to_isa:
            return "\n".join(translate_module_to_llvmir(op.operation) for op in module.body.operations
                             if op.operation.name == "gpu.module")
        (binary,) = [op for op in module.body.operations if op.operation.name == "gpu.binary"]
        return gpu.ObjectAttr(ir.ArrayAttr(binary.operation.attributes["objects"])[0]).object.decode()


def llvm_ir_of(recording) -> str:
    return run_flydsl_pipeline(recording, to_isa=False)


def test_flyautotune_hint_reaches_a_flydsl_kernel(flydsl_gfx942):
    with fat.compile_hints(waves_per_eu=2):
        compile_vector_add()
    prepared = flydsl_gfx942.prepared[-1]
    assert '["amdgpu-waves-per-eu", "2,2"]' in prepared and "rocdl.waves_per_eu" not in prepared
    assert llvm_fn_attribute(llvm_ir_of(flydsl_gfx942), "add_kernel_0", "amdgpu-waves-per-eu") == "2,2"


def test_flydsl_own_hint_alone_stays_minimum_only(flydsl_gfx942):
    with CompilationContext.compile_hints({"waves_per_eu": 2}):
        compile_vector_add()
    prepared = flydsl_gfx942.prepared[-1]
    assert 'rocdl.waves_per_eu = "2"' in prepared and "amdgpu-waves-per-eu" not in prepared
    assert llvm_fn_attribute(llvm_ir_of(flydsl_gfx942), "add_kernel_0", "amdgpu-waves-per-eu") == "2"


def test_flyautotune_snapshot_overrides_flydsl_hint(flydsl_gfx942):
    with CompilationContext.compile_hints({"waves_per_eu": 1}), fat.compile_hints(waves_per_eu=4):
        compile_vector_add()
    prepared = flydsl_gfx942.prepared[-1]
    assert '["amdgpu-waves-per-eu", "4,4"]' in prepared and "rocdl.waves_per_eu" not in prepared


def test_zero_keeps_the_flydsl_kernel_setting(flydsl_gfx942):
    with CompilationContext.compile_hints({"waves_per_eu": 3}), fat.compile_hints(waves_per_eu=0):
        compile_vector_add()
    prepared = flydsl_gfx942.prepared[-1]
    assert 'rocdl.waves_per_eu = "3"' in prepared and "amdgpu-waves-per-eu" not in prepared


def test_flydsl_kernel_compiles_to_gfx942_assembly(flydsl_gfx942):
    with fat.compile_hints(waves_per_eu=2):
        compile_vector_add()
    isa = kernel_isa(run_flydsl_pipeline(flydsl_gfx942, to_isa=True), "add_kernel_0")
    assert isa.arch == "gfx942" and isa.wavefront_size == 64 and isa.max_flat_workgroup_size == 64
    assert isa.occupancy is not None and isa.vgpr_spills == 0
