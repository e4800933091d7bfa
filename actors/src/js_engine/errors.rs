//! JS exceptions and values turned into [`JsError`] and JSON.

use rquickjs::{Ctx, Value};
use serde_json::Value as Json;

use super::{JsError, MEMORY_LIMIT};

/// The name QuickJS gives evaluated scripts in stack traces.
const SCRIPT_NAME: &str = "eval_script";

pub(super) fn to_json<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> Result<Json, JsError> {
    match ctx.json_stringify(v) {
        Ok(Some(s)) => {
            let s = s.to_string().map_err(|e| JsError::Engine(e.to_string()))?;
            serde_json::from_str(&s).map_err(|e| JsError::Engine(e.to_string()))
        }
        Ok(None) => Ok(Json::Null),
        Err(e) => Err(exception(ctx, e)),
    }
}

/// Turns a pending JS exception (or an engine error) into a [`JsError`].
pub(super) fn exception<'js>(ctx: &Ctx<'js>, e: rquickjs::Error) -> JsError {
    if !matches!(e, rquickjs::Error::Exception) {
        return JsError::Engine(e.to_string());
    }
    let thrown = ctx.catch();
    let get = |key: &str| -> Option<String> {
        let obj = thrown.as_object()?;
        let v: Value = obj.get(key).ok()?;
        if v.is_undefined() || v.is_null() {
            return None;
        }
        v.as_string()
            .and_then(|s| s.to_string().ok())
            .or_else(|| ctx.json_stringify(v).ok().flatten().and_then(|s| s.to_string().ok()))
    };
    let (name, message, stack) = if thrown.is_object() {
        (
            get("name").unwrap_or_else(|| "Error".into()),
            get("message").unwrap_or_default(),
            get("stack").unwrap_or_default(),
        )
    } else {
        let text = thrown
            .as_string()
            .and_then(|s| s.to_string().ok())
            .or_else(|| ctx.json_stringify(thrown.clone()).ok().flatten().and_then(|s| s.to_string().ok()))
            .unwrap_or_else(|| "a non-error value was thrown".into());
        ("Error".into(), text, String::new())
    };
    if message.contains("out of memory") {
        return JsError::OutOfMemory { limit: MEMORY_LIMIT };
    }
    // Verb errors carry their structured fields (code, details); keep them.
    let details = thrown
        .as_object()
        .and_then(|_| ctx.json_stringify(thrown.clone()).ok().flatten())
        .and_then(|s| s.to_string().ok())
        .and_then(|s| serde_json::from_str::<Json>(&s).ok())
        .filter(|d| d.as_object().is_some_and(|m| !m.is_empty()))
        .unwrap_or(Json::Null);
    let line = body_line(&stack);
    JsError::Thrown { name, message, stack, line, details }
}

/// The line in the body where the error happened: the first stack frame in the evaluated
/// script that is not one of gm's own prelude functions.
pub(super) fn body_line(stack: &str) -> Option<u32> {
    stack.lines().filter(|l| !l.contains("__gm_")).find_map(|l| {
        let at = l.find(SCRIPT_NAME)? + SCRIPT_NAME.len();
        let rest = l[at..].strip_prefix(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_line_skips_prelude_frames() {
        let stack = "    at __gm_verb (eval_script:9:5)\n    at <anonymous> (eval_script:4:12)\n";
        assert_eq!(body_line(stack), Some(4));
    }
}
