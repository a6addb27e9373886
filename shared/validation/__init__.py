"""Input validation shared by all three backends, one module per impl file it
guards: attention (and backward), variants, blockwise, kv_cache, modules,
sharded, kernels, all built of arrays.py's `check_array`.

Every backend calls these before any compute, so a bad input raises the same
error with the same message in NumPy, PyTorch and JAX (docs/bad-input.md).
They read only `.shape` and `.dtype`, never values, so they also run on JAX
tracers under `jax.jit` and on torch tensors under `torch.compile`.
"""

from shared.validation.arrays import Dims, check_array, check_frameworks, framework_of
from shared.validation.attention import (
    check_bias_names,
    check_d_out,
    check_key_padding,
    check_multi_head,
    check_single_head,
    check_variant_type,
    check_weights,
)
from shared.validation.blockwise import (
    check_block_size,
    check_blockwise,
    check_blockwise_variant,
    check_multi_head_blockwise,
    check_window,
    check_workers,
)
from shared.validation.kernels import (
    check_compiled_tile,
    check_flash,
    check_interpret,
    check_kernel_sizes,
    check_multi_head_flash,
    check_unsupported,
    tile_size,
)
from shared.validation.kv_cache import check_decode_step, check_kv_cache_sizes
from shared.validation.modules import (
    check_from_weights,
    check_module_sizes,
    check_module_variant,
    check_numpy_weights,
    module_sizes_of,
)
from shared.validation.sharded import (
    check_head_shards,
    check_n_devices,
    check_sequence_shards,
    check_sharded,
)
from shared.validation.variants import (
    check_head_shapes,
    check_head_sizes,
    check_heads,
    check_kv_heads,
    check_positions,
    check_rotary,
    check_variant,
)

__all__ = [
    "Dims",
    "check_array",
    "check_bias_names",
    "check_block_size",
    "check_blockwise",
    "check_blockwise_variant",
    "check_compiled_tile",
    "check_d_out",
    "check_decode_step",
    "check_flash",
    "check_frameworks",
    "check_from_weights",
    "check_head_shapes",
    "check_head_shards",
    "check_head_sizes",
    "check_heads",
    "check_interpret",
    "check_kernel_sizes",
    "check_key_padding",
    "check_kv_cache_sizes",
    "check_kv_heads",
    "check_module_sizes",
    "check_module_variant",
    "check_multi_head",
    "check_multi_head_blockwise",
    "check_multi_head_flash",
    "check_n_devices",
    "check_numpy_weights",
    "check_positions",
    "check_rotary",
    "check_sequence_shards",
    "check_sharded",
    "check_single_head",
    "check_unsupported",
    "check_variant",
    "check_variant_type",
    "check_weights",
    "check_window",
    "check_workers",
    "framework_of",
    "module_sizes_of",
    "tile_size",
]
