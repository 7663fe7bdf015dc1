import pytest

import flyautotune as fat
import flyautotune_rocm.hooks as rocm_hooks

GFX942 = fat.Target("rocm", "gfx942", 64)
GFX950 = fat.Target("rocm", "gfx950", 64)


@pytest.fixture
def pm():
    """A fresh plugin manager with only the built-ins and this plugin."""
    return fat.build_plugin_manager(entry_points=False, plugins=[rocm_hooks])


@pytest.fixture
def gfx942():
    return GFX942


@pytest.fixture
def gfx950():
    return GFX950


@pytest.fixture
def dot_kernel():
    """A Triton kernel of one ``tl.dot`` over BLOCK x BLOCK tiles: what ``kpack`` and the fp32 dot precision
    change in the AMDGCN (the tests compare binaries, cross-compiled on the CPU)."""
    triton = pytest.importorskip("triton")
    pytest.importorskip("triton.backends.amd")
    import triton.language as tl

    @triton.jit
    def mm(A, B, C, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        a = tl.load(A + r[:, None] * BLOCK + r[None, :])
        b = tl.load(B + r[:, None] * BLOCK + r[None, :])
        tl.store(C + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))

    return mm


@pytest.fixture
def mlir_ir():
    return pytest.importorskip("flydsl._mlir.ir", reason="the MLIR tests use FlyDSL's embedded MLIR binding")


# A row normalisation that keeps a whole row of N floats live across the
# reduction: register-hungry enough that the VGPR budget shows in the ISA.
ROWNORM = """
    gpu.func @{name}(%a: memref<1048576xf32>, %w: memref<{n}xf32>, %o: memref<1048576xf32>) kernel {attrs} {{
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = arith.constant 256 : index
      %base = arith.muli %bid, %bdim : index
      %row = arith.addi %base, %tid : index
      %n = arith.constant {n} : index
      %off = arith.muli %row, %n : index
      %c0 = arith.constant 0 : index
      %x = vector.load %a[%off] : memref<1048576xf32>, vector<{n}xf32>
      %wv = vector.load %w[%c0] : memref<{n}xf32>, vector<{n}xf32>
      %sq = arith.mulf %x, %x : vector<{n}xf32>
      %sum = vector.reduction <add>, %sq : vector<{n}xf32> into f32
      %one = arith.constant 1.0 : f32
      %inv = arith.divf %one, %sum : f32
      %s = vector.broadcast %inv : f32 to vector<{n}xf32>
      %y0 = arith.mulf %x, %s : vector<{n}xf32>
      %y = arith.mulf %y0, %wv : vector<{n}xf32>
      vector.store %y, %o[%off] : memref<1048576xf32>, vector<{n}xf32>
      gpu.return
    }}
"""

HELPER = """
    gpu.func @helper(%x: f32) -> f32 attributes {llvm.passthrough = ["noinline"], rocdl.waves_per_eu = 1 : i32} {
      %y = arith.addf %x, %x : f32
      gpu.return %y : f32
    }
"""


def module_text(*funcs: str) -> str:
    body = "".join(funcs)
    return f"module attributes {{gpu.container_module}} {{\n  gpu.module @kernels {{{body}  }}\n}}\n"


def rownorm(name: str = "rownorm", n: int = 128, attrs: str = "") -> str:
    return ROWNORM.format(name=name, n=n, attrs=f"attributes {{{attrs}}}" if attrs else "")


@pytest.fixture
def parse(mlir_ir):
    """Parse module text in a fresh context of FlyDSL's binding."""

    def _parse(text: str):
        ctx = mlir_ir.Context()
        return mlir_ir.Module.parse(text, context=ctx)

    return _parse


@pytest.fixture
def two_kernel_module(parse):
    """Two kernels (one with its own passthrough entries, one with rocdl.waves_per_eu) and a helper."""

    def _build():
        return parse(module_text(
            HELPER,
            rownorm("k_passthrough", 64,
                    'llvm.passthrough = ["nounwind", ["amdgpu-waves-per-eu", "3,3"], '
                    '["denormal-fp-math-f32", "preserve-sign"]]'),
            rownorm("k_rocdl", 64, "rocdl.waves_per_eu = 2 : i32"),
        ))

    return _build


@pytest.fixture
def mlir_text():
    """Builders for MLIR test modules: ``.module(*funcs)``, ``.rownorm(name, n, attrs)``, ``.helper``."""
    import types

    return types.SimpleNamespace(module=module_text, rownorm=rownorm, helper=HELPER)
