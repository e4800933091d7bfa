//! The edge: JSON-RPC framing and MCP shapes. Nothing outside `protocol` and `server` sees
//! these types; verbs take typed arguments and return plain values.

pub mod jsonrpc;
pub mod mcp;
pub mod modern;
pub mod shared;
