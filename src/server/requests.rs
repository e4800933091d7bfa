//! The methods other than tools/call: the handshake, the lists, resources, prompts and skills.
//! Each result is a typed shape of `protocol::mcp`, built here from gm's own types.

use gm_actors::log_writer::WriteOut;
use serde::Serialize;
use serde_json::{json, Value};

use super::{surface, Later, Server};
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::mcp;
use crate::server::surface::Surface;
use crate::{dts, skills};

/// The prompts gm serves: each skill, with the `gm` skill taking the run's task.
const PROMPTS: &[(&str, &str, &str, &str)] = &[
    (
        "gm",
        "gm: run a task",
        "The gm skill: the loop and the seven rules of a run, with the run's task.",
        "skill://gm/SKILL.md",
    ),
    ("gm-continue", "gm: continue a run", "Continue a gm run that was handed off.", "skill://gm-continue/SKILL.md"),
];

impl Server {
    /// The requests that answer later: a ping, once the log has caught up.
    pub(super) fn later_request(&self, id: &Value, method: &str) -> Option<Later> {
        if method == "ping" {
            // A ping answers once the log file holds every event sent before it, so a client
            // (a test, a host about to read the log) can wait for the log to catch up.
            let (log, id) = (self.app.ctx.log.clone(), id.clone());
            let future = async move {
                if let Some(log) = log {
                    let _ = log.send(WriteOut).await;
                }
                Some(jsonrpc::result(&id, json!({})).to_string())
            };
            return Some(Later { future: Box::pin(future), call: None });
        }
        None
    }

    /// One request other than tools/call; `protocol` is the version it speaks (the handshake's
    /// for a request of that era, `None` before `initialize`).
    pub(super) fn on_request(
        &mut self,
        method: &str,
        params: Value,
        protocol: Option<&'static str>,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                let requested = params.get("protocolVersion").and_then(Value::as_str);
                let result = mcp::initialize_result(requested);
                // The handshake's state is the connection's: later requests without an
                // envelope speak this version.
                self.session.protocol = Some(result.protocol_version);
                self.session.client = params.get("clientInfo").cloned();
                self.session.elicitation = params.pointer("/capabilities/elicitation").is_some_and(Value::is_object);
                self.log(
                    "initialize",
                    json!({ "requested": requested, "protocolVersion": result.protocol_version, "client": params.get("clientInfo") }),
                );
                ok(&result)
            }
            "server/discover" => ok(&mcp::DiscoverResult {
                supported_versions: mcp::discover_versions(),
                capabilities: mcp::capabilities(),
                server_info: mcp::server_info(),
                instructions: mcp::instructions(),
            }),
            "ping" | "logging/setLevel" => Ok(json!({})),
            "tools/list" => {
                // Answered at once: run_code's description names the child tools offered now
                // and the servers still starting; the host hears tools/list_changed when that
                // changes.
                let offered = match self.conn.surface {
                    Surface::Code => self.app.ctx.children.offered(),
                    Surface::Tools => Default::default(),
                };
                let tools = surface::tools(self.conn.surface, &offered);
                let (tools, next_cursor) = page(tools, &params, self.conn.page_size)?;
                ok(&mcp::ListToolsResult { tools, next_cursor })
            }
            "resources/list" => {
                let resources = self.app.ctx.skills.files().into_iter().map(resource).collect();
                let (resources, next_cursor) = page(resources, &params, self.conn.page_size)?;
                ok(&mcp::ListResourcesResult { resources, next_cursor })
            }
            "resources/templates/list" => ok(&mcp::ListResourceTemplatesResult { resource_templates: Vec::new() }),
            "resources/read" => self.read_resource(&params),
            "resources/subscribe" => {
                // Any URI may be subscribed to (the spec asks no more); only gm.d.ts changes
                // while gm runs, when child servers' tools come or go (`Server`'s
                // ToolsChanged). Its digest now is what a change is told against.
                let uri = str_param(&params, "uri")?;
                if uri == dts::URI {
                    self.session.dts_digest = Some(skills::digest(self.app.ctx.skills.declarations().as_bytes()));
                }
                self.session.subscribed.insert(uri.to_owned());
                Ok(json!({}))
            }
            "resources/unsubscribe" => {
                let uri = str_param(&params, "uri")?;
                self.session.subscribed.remove(uri);
                Ok(json!({}))
            }
            "prompts/list" => ok(&mcp::ListPromptsResult { prompts: PROMPTS.iter().map(prompt).collect() }),
            "prompts/get" => self.get_prompt(&params),
            "skills/list" => {
                let skills = &self.app.ctx.skills;
                let entries: Vec<Value> = skills.names().iter().filter_map(|n| skills.entry(n).ok()).collect();
                let (skills, next_cursor) = page(entries, &params, self.conn.page_size)?;
                let cache = mcp::CacheHints::for_protocol(protocol);
                ok(&mcp::ListSkillsResult { result_type: "complete", skills, next_cursor, cache })
            }
            "skills/get" => {
                let uri = str_param(&params, "uri")?;
                // SEP-2640: a URI that names no skill this server serves is invalid params.
                let unknown = |why: String| RpcError::invalid_params(why).with_data(json!({ "uri": uri }));
                let skill = uri
                    .strip_prefix("skill://")
                    .and_then(|r| r.strip_suffix("/SKILL.md"))
                    .ok_or_else(|| unknown(format!("not a SKILL.md URI: {uri}")))?;
                let entry = self.app.ctx.skills.entry(skill).map_err(|e| unknown(e.to_string()))?;
                let cache = mcp::CacheHints::for_protocol(protocol);
                ok(&mcp::GetSkillResult { result_type: "complete", skill: entry, cache })
            }
            other => Err(RpcError::new(jsonrpc::METHOD_NOT_FOUND, format!("method not found: {other}"))),
        }
    }

    fn read_resource(&mut self, params: &Value) -> Result<Value, RpcError> {
        let uri = str_param(params, "uri")?;
        let text =
            self.app.ctx.skills.read(uri).map_err(|e| {
                RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, e.to_string()).with_data(json!({ "uri": uri }))
            })?;
        if uri == "skill://gm/SKILL.md" {
            // The read gate: run_code opens on this connection.
            self.session.run.skill_read = true;
            // run_code is open now: have its engines warm by the time it is called.
            self.app.js.start();
        }
        if uri == dts::URI {
            // What this connection has seen: a later change is told against it.
            self.session.dts_digest = Some(skills::digest(text.as_bytes()));
        }
        self.log("skill-read", json!({ "uri": uri, "bytes": text.len() }));
        ok(&mcp::ReadResourceResult {
            contents: vec![mcp::TextResourceContents { uri: uri.to_owned(), mime_type: mime_type(uri), text }],
        })
    }

    fn get_prompt(&mut self, params: &Value) -> Result<Value, RpcError> {
        let name = str_param(params, "name")?;
        let &(_, _, description, uri) = PROMPTS
            .iter()
            .find(|p| p.0 == name)
            .ok_or_else(|| RpcError::invalid_params(format!("unknown prompt: {name}")))?;
        let text = self.app.ctx.skills.read(uri).map_err(|e| RpcError::new(jsonrpc::INTERNAL_ERROR, e.to_string()))?;
        let mut body = skills::body(&text).to_owned();
        let task = params.pointer("/arguments/task").and_then(Value::as_str).filter(|t| !t.trim().is_empty());
        if let (Some(task), "gm") = (task, name) {
            crate::run::set_task(&self.app, &mut self.session.run, task);
            body.push_str(&format!("\n\n## Task\n\n{task}\n"));
        }
        ok(&mcp::GetPromptResult {
            description,
            messages: vec![mcp::PromptMessage { role: "user", content: mcp::TextContent::new(body) }],
        })
    }
}

fn ok<T: Serialize>(result: &T) -> Result<Value, RpcError> {
    Ok(mcp::to_value(result))
}

fn resource(f: skills::SkillFile) -> mcp::Resource {
    let description = match f.uri.as_str() {
        dts::URI => Some(dts::DESCRIPTION.to_owned()),
        _ => f.description,
    };
    mcp::Resource {
        name: f.name.unwrap_or_else(|| format!("{}/{}", f.skill, f.file)),
        description,
        mime_type: mime_type(&f.uri),
        uri: f.uri,
        size: f.size,
        meta: mcp::ResourceMeta { digest: f.digest },
    }
}

/// The skill files are markdown, but for the generated declarations.
fn mime_type(uri: &str) -> &'static str {
    if uri == dts::URI {
        dts::MIME_TYPE
    } else {
        "text/markdown"
    }
}

fn prompt(&(name, title, description, _): &(&'static str, &'static str, &'static str, &'static str)) -> mcp::Prompt {
    let arguments = match name {
        "gm" => vec![mcp::PromptArgument { name: "task", description: "The task of the run.", required: false }],
        _ => Vec::new(),
    };
    mcp::Prompt { name, title, description, arguments }
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("params.{key} must be a string")))
}

/// Cursor paging over a list: the cursor is the decimal offset of the next page.
fn page<T>(mut items: Vec<T>, params: &Value, page_size: usize) -> Result<(Vec<T>, Option<String>), RpcError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= items.len())
            .ok_or_else(|| RpcError::invalid_params(format!("invalid cursor: {c}")))?,
        Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
    };
    let end = (start + page_size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    items.truncate(end);
    Ok((items.split_off(start), next))
}
