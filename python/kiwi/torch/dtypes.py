"""kiwi's dtype names (docs/graph-format.md) for torch dtypes, and the bytes of a graph node's tensor."""
import torch

# torch dtype -> kiwi's name; bool and int8 tensors take a byte each, as u8.
KIWI_DTYPES = {torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
               torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "u8", torch.int8: "u8"}

DTYPE_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "u8": 1}


def node_bytes(node: dict) -> int:
    """Bytes of a kiwi graph node's tensor (dtype x shape)."""
    size = DTYPE_BYTES[node["dtype"]]
    for d in node["shape"]:
        size *= d
    return size
