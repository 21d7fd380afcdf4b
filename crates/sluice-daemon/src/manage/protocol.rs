//! JSON-RPC 2.0 framing of the management API: one request object per line in, one
//! response object per line out (the shape SPDK's rpc.py speaks, without batches).
//!
//! Every refusal carries a code a script can branch on and, in `data`, the field it is
//! about (`{"field": "nsid", "reason": "..."}`), so an operator sees what to change.

use serde_json::{json, Map, Value};

// The codes live with the client, which callers (the CLI, the CSI driver) branch on.
pub use management_client::codes::*;

/// Longest request line accepted. Management requests are a few hundred bytes; the
/// bound keeps a runaway client from making the server buffer without limit.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// With `data.field` naming the request field (or config key) at fault.
    pub fn with_field(code: i64, field: &str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        RpcError {
            code,
            message: format!("{field}: {reason}"),
            data: Some(json!({ "field": field, "reason": reason })),
        }
    }

    /// A parameter problem (-32602) naming the parameter.
    pub fn invalid_params(field: &str, reason: impl Into<String>) -> Self {
        RpcError::with_field(INVALID_PARAMS, field, reason)
    }

    /// A change refused because of what exists (-32000) naming the parameter.
    pub fn refused(field: &str, reason: impl Into<String>) -> Self {
        RpcError::with_field(CHANGE_REFUSED, field, reason)
    }

    /// The same error with a machine-readable `data.cause` (see
    /// `management_client::codes::causes`), so callers need not read the message.
    pub fn with_cause(mut self, cause: &str) -> Self {
        let data = self.data.get_or_insert_with(|| json!({}));
        data["cause"] = json!(cause);
        self
    }

    /// The changed config would not validate (-32001); `location` is the config
    /// module's name for the entry, e.g. `subsystem[1] (nqn...) namespace[0].size`.
    pub fn config_invalid(location: &str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        RpcError {
            code: CONFIG_INVALID,
            message: format!("the configuration would not be valid: {location}: {reason}"),
            data: Some(json!({ "location": location, "reason": reason })),
        }
    }

    fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// A well-formed request.
#[derive(Debug)]
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Params,
}

/// A request line that cannot be run: the id to answer with (null when the id could
/// not be read) and the error.
#[derive(Debug)]
pub struct BadRequest {
    pub id: Value,
    pub error: RpcError,
}

fn bad(id: Value, error: RpcError) -> Box<BadRequest> {
    Box::new(BadRequest { id, error })
}

/// Parses one request line.
pub fn parse_request(line: &[u8]) -> Result<Request, Box<BadRequest>> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|error| bad(Value::Null, RpcError::new(PARSE_ERROR, format!("the request is not JSON: {error}"))))?;
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err(bad(
                Value::Null,
                RpcError::new(INVALID_REQUEST, "batch requests are not supported: send one request object per line"),
            ))
        }
        _ => return Err(bad(Value::Null, RpcError::new(INVALID_REQUEST, "the request must be a JSON object"))),
    };
    // The id first, so that every later refusal can be matched to its request.
    let id = match object.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        Some(_) => {
            return Err(bad(Value::Null, RpcError::with_field(INVALID_REQUEST, "id", "must be a string or a number")))
        }
        // A notification would change the target with nobody told whether it worked.
        None => {
            return Err(bad(
                Value::Null,
                RpcError::with_field(
                    INVALID_REQUEST,
                    "id",
                    "missing; notifications are not supported, give every request an id",
                ),
            ))
        }
    };
    let refuse = |field: &str, reason: &str| bad(id.clone(), RpcError::with_field(INVALID_REQUEST, field, reason));
    match object.remove("jsonrpc") {
        Some(Value::String(version)) if version == "2.0" => {}
        _ => return Err(refuse("jsonrpc", "must be \"2.0\"")),
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return Err(refuse("method", "must be a string")),
        None => return Err(refuse("method", "missing")),
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(Value::Array(_)) => {
            return Err(bad(
                id,
                RpcError::invalid_params("params", "must be an object of named parameters, not an array"),
            ))
        }
        Some(_) => return Err(refuse("params", "must be an object")),
    };
    if let Some(unknown) = object.keys().next() {
        return Err(refuse(unknown, "not a JSON-RPC 2.0 request member (expected jsonrpc, id, method, params)"));
    }
    Ok(Request { id, method, params: Params::new(params) })
}

/// The success response for `id`.
pub fn success(id: Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// The error response for `id`.
pub fn failure(id: Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() })
}

/// Parameters whose values are secrets (host_allow's DH-HMAC-CHAP secrets and TLS
/// PSK): never logged.
const SECRET_PARAMETERS: [&str; 3] = ["dhchap_secret", "dhchap_ctrl_secret", "tls_key"];

/// Named parameters, taken out one by one so that `finish` can refuse the ones no
/// method reads (a misspelt optional parameter must not be silently ignored).
#[derive(Debug, Default)]
pub struct Params {
    fields: Map<String, Value>,
}

impl Params {
    pub fn new(fields: Map<String, Value>) -> Self {
        Params { fields }
    }

    /// The parameters as one line of JSON for the audit log, secrets masked: the
    /// values of the secret parameters (and of any parameter whose name says
    /// "secret"), and every key in the `DHHC-1:` or `NVMeTLSkey-1:` form wherever it
    /// appears (under a misspelt name it is still a secret).
    pub fn redacted(&self) -> String {
        let mut fields = self.fields.clone();
        for (name, value) in fields.iter_mut() {
            if SECRET_PARAMETERS.contains(&name.as_str()) || name.contains("secret") {
                *value = Value::from("<redacted>");
            }
        }
        sluice_config::redact_secrets(&Value::Object(fields).to_string())
    }

    /// Removes `name`; an explicit null counts as absent.
    fn take(&mut self, name: &str) -> Option<Value> {
        self.fields.remove(name).filter(|value| !value.is_null())
    }

    pub fn required_string(&mut self, name: &str) -> Result<String, RpcError> {
        self.optional_string(name)?.ok_or_else(|| RpcError::invalid_params(name, "missing"))
    }

    pub fn optional_string(&mut self, name: &str) -> Result<Option<String>, RpcError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(RpcError::invalid_params(name, format!("must be a string, not {}", kind(&other)))),
        }
    }

    /// A list of names: a JSON array of strings, or one comma-separated string
    /// (what a CLI flag gives).
    pub fn optional_string_list(&mut self, name: &str) -> Result<Option<Vec<String>>, RpcError> {
        let must = || RpcError::invalid_params(name, "must be an array of strings or a comma-separated string");
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(text)) => {
                Ok(Some(text.split(',').map(str::trim).filter(|item| !item.is_empty()).map(str::to_string).collect()))
            }
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|item| item.as_str().map(str::to_string).ok_or_else(must))
                .collect::<Result<_, _>>()
                .map(Some),
            Some(_) => Err(must()),
        }
    }

    pub fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, RpcError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(flag)),
            Some(other) => Err(RpcError::invalid_params(name, format!("must be true or false, not {}", kind(&other)))),
        }
    }

    pub fn required_u32(&mut self, name: &str) -> Result<u32, RpcError> {
        self.optional_u32(name)?.ok_or_else(|| RpcError::invalid_params(name, "missing"))
    }

    pub fn optional_u32(&mut self, name: &str) -> Result<Option<u32>, RpcError> {
        match self.take(name) {
            None => Ok(None),
            Some(value) => value.as_u64().and_then(|number| u32::try_from(number).ok()).map(Some).ok_or_else(|| {
                RpcError::invalid_params(name, format!("must be an integer 0..=4294967295, not {value}"))
            }),
        }
    }

    /// Any whole number, negative ones too (the config check refuses those with the
    /// message a config file gets); text that is a whole number is taken as one
    /// (what a CLI flag gives).
    pub fn optional_integer(&mut self, name: &str) -> Result<Option<i64>, RpcError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(number)) => number
                .as_i64()
                .map(Some)
                .ok_or_else(|| RpcError::invalid_params(name, format!("must be a whole number, not {number}"))),
            Some(Value::String(text)) => text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| RpcError::invalid_params(name, format!("must be a whole number, not {text:?}"))),
            Some(other) => Err(RpcError::invalid_params(name, format!("must be a whole number, not {}", kind(&other)))),
        }
    }

    /// A size as the config writes it: a number of bytes or a string like "64MiB".
    pub fn optional_size(&mut self, name: &str) -> Result<Option<SizeParam>, RpcError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(number)) => {
                number.as_u64().map(|bytes| Some(SizeParam::Bytes(bytes))).ok_or_else(|| {
                    RpcError::invalid_params(name, format!("must be a whole number of bytes, not {number}"))
                })
            }
            Some(Value::String(text)) => units::parse_byte_size(&text)
                .map(|_| Some(SizeParam::Text(text)))
                .map_err(|reason| RpcError::invalid_params(name, reason.to_string())),
            Some(other) => Err(RpcError::invalid_params(
                name,
                format!("must be a number of bytes or a string like \"64MiB\", not {}", kind(&other)),
            )),
        }
    }

    /// Refuses any parameter the method did not take.
    pub fn finish(self, method: &str) -> Result<(), RpcError> {
        match self.fields.keys().next() {
            None => Ok(()),
            Some(unknown) => Err(RpcError::invalid_params(unknown, format!("unknown parameter of {method}"))),
        }
    }
}

/// A size parameter, kept as the client wrote it so the config file reads the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeParam {
    Bytes(u64),
    Text(String),
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(line: &str) -> (Value, RpcError) {
        let refused = parse_request(line.as_bytes()).expect_err(line);
        (refused.id, refused.error)
    }

    #[test]
    fn a_request_parses_with_or_without_params() {
        let request =
            parse_request(br#"{"jsonrpc":"2.0","id":7,"method":"ns_list","params":{"subsystem":"nqn.a"}}"#).unwrap();
        assert_eq!(request.id, json!(7));
        assert_eq!(request.method, "ns_list");
        let mut params = request.params;
        assert_eq!(params.required_string("subsystem").unwrap(), "nqn.a");
        params.finish("ns_list").unwrap();
        let request = parse_request(br#"{"jsonrpc":"2.0","id":"x","method":"subsystem_list"}"#).unwrap();
        assert_eq!(request.id, json!("x"));
    }

    #[test]
    fn redacted_params_never_show_a_secret() {
        let secret = "DHHC-1:00:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2Vj:";
        let tls_key = "NVMeTLSkey-1:01:a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5:";
        let params = Params::new(
            json!({
                "nqn": "nqn.a", "host": "nqn.h", "dhchap_secret": secret, "dhchap_ctrl_secret": secret,
                "tls_key": tls_key, "tls_key_derivation": "compat", "dhchap_secrte": secret, "note": tls_key,
            })
            .as_object()
            .cloned()
            .unwrap(),
        );
        let shown = params.redacted();
        assert!(!shown.contains("c2VjcmV0") && !shown.contains("a2V5a2V5"), "{shown}");
        assert!(shown.contains("\"nqn\":\"nqn.a\"") && shown.contains("\"tls_key_derivation\":\"compat\""), "{shown}");
    }

    #[test]
    fn nonsense_gets_the_right_code_and_field() {
        assert_eq!(refusal("{not json").1.code, PARSE_ERROR);
        assert_eq!(refusal("[]").1.code, INVALID_REQUEST);
        assert_eq!(refusal("42").1.code, INVALID_REQUEST);
        let (id, error) = refusal(r#"{"jsonrpc":"2.0","method":"x"}"#);
        assert_eq!((id, error.code), (Value::Null, INVALID_REQUEST));
        assert_eq!(error.data.unwrap()["field"], "id");
        let (id, error) = refusal(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#);
        assert_eq!((id, error.data.unwrap()["field"].clone()), (json!(3), json!("jsonrpc")));
        let (_, error) = refusal(r#"{"jsonrpc":"2.0","id":3}"#);
        assert_eq!(error.data.unwrap()["field"], "method");
        let (_, error) = refusal(r#"{"jsonrpc":"2.0","id":3,"method":"x","params":[1]}"#);
        assert_eq!(error.code, INVALID_PARAMS);
        let (_, error) = refusal(r#"{"jsonrpc":"2.0","id":3,"method":"x","extra":1}"#);
        assert_eq!(error.data.unwrap()["field"], "extra");
    }

    #[test]
    fn parameters_are_typed_and_unknown_ones_refused() {
        let mut params = Params::new(
            json!({"nsid": -1, "size": "12 parsecs", "flag": "yes", "typo": 1}).as_object().unwrap().clone(),
        );
        assert_eq!(params.optional_u32("nsid").unwrap_err().data.unwrap()["field"], "nsid");
        assert!(params.optional_size("size").unwrap_err().message.contains("unknown unit"));
        assert_eq!(params.optional_bool("flag").unwrap_err().code, INVALID_PARAMS);
        assert_eq!(params.required_string("nqn").unwrap_err().message, "nqn: missing");
        let error = params.finish("ns_add").unwrap_err();
        assert_eq!(error.data.unwrap()["field"], "typo");

        let mut params = Params::new(json!({"size": 4096, "other": "64MiB"}).as_object().unwrap().clone());
        assert_eq!(params.optional_size("size").unwrap(), Some(SizeParam::Bytes(4096)));
        assert_eq!(params.optional_size("other").unwrap(), Some(SizeParam::Text("64MiB".into())));
        params.finish("x").unwrap();
    }
}
