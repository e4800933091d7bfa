//! Whether gm exports, and where: the standard `OTEL_*` variables, else `~/.gmnew/config.json`'s
//! `{"otel": {...}}`. Nothing in the workspace is read: a repository must not turn export on or
//! send a run's spans elsewhere.
//!
//! The exporters read the rest of the standard variables themselves (per-signal endpoints,
//! headers, timeouts, batch and interval settings); this module only decides whether export is
//! on, which protocol each signal uses, and what the file adds where the environment is silent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The variables that turn export on.
pub const ENDPOINT_VARS: [&str; 3] =
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"];

/// `GM_OTEL_CONTENT=1`: spans carry the (masked) arguments and results of tool calls.
pub const CONTENT_VAR: &str = "GM_OTEL_CONTENT";

/// How a signal is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    Grpc,
}

impl Protocol {
    fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "http/protobuf" => Some(Self::HttpProtobuf),
            "grpc" => Some(Self::Grpc),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::Grpc => "grpc",
        }
    }
}

/// One signal's export: its protocol, and the endpoint the config file gives when no variable
/// names one (the exporter reads the variables itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub protocol: Protocol,
    /// The whole URL to send to, from the file; `None`: the exporter resolves it from the
    /// environment (or the protocol's default, localhost).
    pub endpoint: Option<String>,
}

/// Export is on: what to send, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelConfig {
    /// `None`: `OTEL_TRACES_EXPORTER=none`.
    pub traces: Option<Signal>,
    /// `None`: `OTEL_METRICS_EXPORTER=none`.
    pub metrics: Option<Signal>,
    /// The file's headers, sent unless `OTEL_EXPORTER_OTLP_HEADERS` (which the exporter reads) is set.
    pub headers: BTreeMap<String, String>,
    /// The file's service name, unless `OTEL_SERVICE_NAME` or a `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES` says one; else `gm`.
    pub service_name: Option<String>,
    /// Tool arguments and results go on spans (`GM_OTEL_CONTENT=1`).
    pub content: bool,
}

impl OtelConfig {
    /// Whether the environment names the service (the SDK's resource detectors read it).
    pub fn env_names_service(env: &dyn Fn(&str) -> Option<String>) -> bool {
        env("OTEL_SERVICE_NAME").is_some_and(|s| !s.trim().is_empty())
            || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
                a.split(',').any(|kv| kv.split('=').next().is_some_and(|k| k.trim() == "service.name"))
            })
    }
}

/// `~/.gmnew/config.json`'s `otel` section. Present, it turns export on.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileSection {
    /// The collector's base URL (`http://localhost:4318`, or `:4317` for grpc).
    endpoint: Option<String>,
    protocol: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    service_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {why}")]
    File { file: PathBuf, why: String },
    #[error("{var}={value:?} is not a protocol gm exports with (http/protobuf or grpc)")]
    Protocol { var: String, value: String },
}

/// Reads the configuration: `None` when nothing turns export on (the usual case, which costs a
/// few variable reads and at most one small file read). `env` reads a variable (the process's
/// environment; tests pass their own).
pub fn resolve(
    env: &dyn Fn(&str) -> Option<String>,
    home_config: Option<&Path>,
) -> Result<Option<OtelConfig>, ConfigError> {
    let set = |var: &str| env(var).filter(|v| !v.trim().is_empty());
    // The spec's switch for the whole SDK.
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let from_env = ENDPOINT_VARS.iter().any(|var| set(var).is_some());
    let file = match home_config {
        Some(path) => read_section(path)?,
        None => None,
    };
    if !from_env && file.is_none() {
        return Ok(None);
    }
    let file = file.unwrap_or_default();
    let file_protocol = match &file.protocol {
        Some(p) => Some(
            Protocol::parse(p)
                .ok_or_else(|| ConfigError::Protocol { var: "otel.protocol".into(), value: p.clone() })?,
        ),
        None => None,
    };
    let protocol_of = |signal_var: &str| -> Result<Protocol, ConfigError> {
        for var in [signal_var, "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            if let Some(value) = set(var) {
                return Protocol::parse(&value).ok_or_else(|| ConfigError::Protocol { var: var.into(), value });
            }
        }
        Ok(file_protocol.unwrap_or(Protocol::HttpProtobuf))
    };
    let endpoint_of = |signal_var: &str, path: &str, protocol: Protocol| -> Option<String> {
        // A variable wins: the exporter reads it.
        if set(signal_var).is_some() || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            return None;
        }
        let base = file.endpoint.as_deref()?.trim();
        Some(match protocol {
            // OTLP/HTTP: the signal's path goes after the base URL, as for the variable.
            Protocol::HttpProtobuf => format!("{}{path}", base.trim_end_matches('/')),
            Protocol::Grpc => base.to_owned(),
        })
    };
    let signal = |exporter_var: &str, protocol_var: &str, endpoint_var: &str, path: &str| {
        if set(exporter_var).is_some_and(|v| v.split(',').all(|e| e.trim() == "none")) {
            return Ok(None);
        }
        let protocol = protocol_of(protocol_var)?;
        Ok(Some(Signal { protocol, endpoint: endpoint_of(endpoint_var, path, protocol) }))
    };
    let traces = signal(
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "/v1/traces",
    )?;
    let metrics = signal(
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "/v1/metrics",
    )?;
    if traces.is_none() && metrics.is_none() {
        return Ok(None);
    }
    Ok(Some(OtelConfig {
        traces,
        metrics,
        headers: file.headers,
        service_name: file.service_name,
        content: set(CONTENT_VAR).is_some_and(|v| v.trim() == "1" || v.trim().eq_ignore_ascii_case("true")),
    }))
}

fn read_section(file: &Path) -> Result<Option<FileSection>, ConfigError> {
    let bad = |why: String| ConfigError::File { file: file.to_owned(), why };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    match value.get("otel") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(section) => serde_json::from_value(section.clone()).map(Some).map_err(|e| bad(format!("otel: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn nothing_set_means_no_export() {
        assert_eq!(resolve(&env_of(&[]), None).expect("resolves"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"sandbox": {"mode": "off"}}"#).expect("write");
        assert_eq!(resolve(&env_of(&[]), Some(&file)).expect("resolves"), None);
        assert_eq!(resolve(&env_of(&[]), Some(&dir.path().join("missing.json"))).expect("resolves"), None);
    }

    #[test]
    fn an_endpoint_variable_turns_both_signals_on_over_http_protobuf() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")]);
        let config = resolve(&env, None).expect("resolves").expect("on");
        let http = Some(Signal { protocol: Protocol::HttpProtobuf, endpoint: None });
        assert_eq!((config.traces, config.metrics), (http.clone(), http));
        assert!(!config.content);
    }

    #[test]
    fn protocol_and_exporter_none_are_honoured_per_signal() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]);
        let config = resolve(&env, None).expect("resolves").expect("on");
        assert_eq!(config.traces, None);
        assert_eq!(config.metrics.map(|m| m.protocol), Some(Protocol::HttpProtobuf));
        let grpc =
            resolve(&env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "x"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]), None)
                .expect("resolves")
                .expect("on");
        assert_eq!(grpc.traces.map(|t| t.protocol), Some(Protocol::Grpc));
    }

    #[test]
    fn an_unknown_protocol_is_an_error_naming_the_variable() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "x"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        let err = resolve(&env, None).expect_err("refused");
        assert!(err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{err}");
    }

    #[test]
    fn sdk_disabled_wins() {
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "x"), ("OTEL_SDK_DISABLED", "true")]);
        assert_eq!(resolve(&env, None).expect("resolves"), None);
    }

    #[test]
    fn the_file_section_turns_export_on_and_the_environment_wins_over_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.json");
        std::fs::write(
            &file,
            r#"{"otel": {"endpoint": "http://collector:4318/", "headers": {"x-key": "v"}, "serviceName": "mine"}}"#,
        )
        .expect("write");
        let config = resolve(&env_of(&[("GM_OTEL_CONTENT", "1")]), Some(&file)).expect("resolves").expect("on");
        assert_eq!(config.traces.and_then(|t| t.endpoint).as_deref(), Some("http://collector:4318/v1/traces"));
        assert_eq!(config.metrics.and_then(|t| t.endpoint).as_deref(), Some("http://collector:4318/v1/metrics"));
        assert_eq!(config.headers.get("x-key").map(String::as_str), Some("v"));
        assert_eq!(config.service_name.as_deref(), Some("mine"));
        assert!(config.content);
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318")]);
        let config = resolve(&env, Some(&file)).expect("resolves").expect("on");
        assert_eq!(config.traces.and_then(|t| t.endpoint), None, "the exporter reads the variable");
    }

    #[test]
    fn a_broken_file_section_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"otel": {"endpont": "x"}}"#).expect("write");
        assert!(matches!(resolve(&env_of(&[]), Some(&file)), Err(ConfigError::File { .. })));
    }

    #[test]
    fn the_service_is_named_by_either_variable() {
        assert!(OtelConfig::env_names_service(&env_of(&[("OTEL_SERVICE_NAME", "a")])));
        assert!(OtelConfig::env_names_service(&env_of(&[("OTEL_RESOURCE_ATTRIBUTES", "x=1, service.name=b")])));
        assert!(!OtelConfig::env_names_service(&env_of(&[("OTEL_RESOURCE_ATTRIBUTES", "x=1")])));
    }
}
