//! The API over HTTP, for the command-line client: each call answers the
//! response's JSON, or the server's error (its `error.message`) as a
//! [`CliError`].

use serde_json::Value;

/// What went wrong, and so how the client exits.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line makes no sense (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The server refused the request or could not be reached (exit 1).
    #[error("{0}")]
    Refused(String),
    /// Standard output was closed by its reader (exit 0, quietly: see
    /// [`super::out`]).
    #[error("standard output was closed")]
    ClosedPipe,
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Refused(_) => 1,
            Self::ClosedPipe => 0,
        }
    }
}

pub struct ApiClient {
    http: reqwest::Client,
    server: String,
    token: Option<String>,
}

impl ApiClient {
    pub fn new(server: &str, token: Option<String>) -> Result<Self, CliError> {
        let server = server.trim_end_matches('/').to_owned();
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--server must be an http:// or https:// URL (got {server:?})"
            )));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| CliError::Refused(format!("cannot make an HTTP client: {e}")))?;
        Ok(Self {
            http,
            server,
            token: token.filter(|token| !token.is_empty()),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.server));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CliError> {
        let path = if query.is_empty() {
            path.to_owned()
        } else {
            let pairs: Vec<String> = query
                .iter()
                .map(|(name, value)| format!("{name}={}", path_segment(value)))
                .collect();
            format!("{path}?{}", pairs.join("&"))
        };
        self.answer(self.request(reqwest::Method::GET, &path).send().await)
            .await
    }

    /// A POST without a body.
    pub async fn post_empty(&self, path: &str) -> Result<Value, CliError> {
        self.answer(self.request(reqwest::Method::POST, path).send().await)
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.answer(self.post_json(path, body).send().await).await
    }

    async fn answer(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<Value, CliError> {
        let response = sent.map_err(|e| unreachable_server(&self.server, &e))?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let text = response
            .text()
            .await
            .map_err(|e| CliError::Refused(format!("the answer was cut short: {e}")))?;
        serde_json::from_str(&text)
            .map_err(|e| CliError::Refused(format!("the server's answer is not JSON: {e}")))
    }

    /// A POST whose answer is an event stream: the response, once its
    /// status says the run was created.
    pub async fn post_stream(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<reqwest::Response, CliError> {
        let response = self
            .post_json(path, body)
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| unreachable_server(&self.server, &e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(refusal(response).await)
    }

    /// A run's event stream after sequence `after` (a resumption): the
    /// response, or `None` when the run has ended before anything more
    /// (204).
    pub async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Option<reqwest::Response>, CliError> {
        let path = format!("/v1/runs/{}/events", path_segment(run_id));
        let response = self
            .request(reqwest::Method::GET, &path)
            .header("accept", "text/event-stream")
            .header("last-event-id", after.to_string())
            .send()
            .await
            .map_err(|e| unreachable_server(&self.server, &e))?;
        match response.status() {
            reqwest::StatusCode::NO_CONTENT => Ok(None),
            status if status.is_success() => Ok(Some(response)),
            _ => Err(refusal(response).await),
        }
    }

    /// A POST of raw bytes (an upload's archive), answered with JSON.
    pub async fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Value, CliError> {
        let sent = self
            .request(reqwest::Method::POST, path)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await;
        self.answer(sent).await
    }

    /// A GET whose answer is bytes (a diff, an archive): the response,
    /// once its status says it is what was asked for, to be read with
    /// [`copy_body`].
    pub async fn get_bytes(&self, path: &str) -> Result<reqwest::Response, CliError> {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(|e| unreachable_server(&self.server, &e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(refusal(response).await)
    }

    fn post_json(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
    }
}

/// Writes the body of `response` to `sink` as it comes, flushed at the
/// end; `what` names the sink in an error (a closed standard output is
/// [`CliError::ClosedPipe`]).
pub async fn copy_body(
    mut response: reqwest::Response,
    sink: &mut dyn std::io::Write,
    what: &str,
) -> Result<(), CliError> {
    let failed = |error: std::io::Error| match error.kind() {
        std::io::ErrorKind::BrokenPipe => CliError::ClosedPipe,
        _ => CliError::Refused(format!("cannot write to {what}: {error}")),
    };
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CliError::Refused(format!("the answer was cut short: {e}")))?
    {
        sink.write_all(&chunk).map_err(failed)?;
    }
    sink.flush().map_err(failed)
}

/// A server that did not answer: where it was looked for, why, and what
/// to do about it.
fn unreachable_server(server: &str, error: &reqwest::Error) -> CliError {
    let why = if error.is_connect() {
        "nothing answers there".to_owned()
    } else if error.is_timeout() {
        "it did not answer in time".to_owned()
    } else {
        error.to_string()
    };
    CliError::Refused(format!(
        "cannot reach the server at {server} ({why}); start one with `agent-runner serve`, \
         or point at another with --server URL or AGENT_RUNNER_URL"
    ))
}

/// The server's error, as its status and message.
async fn refusal(response: reqwest::Response) -> CliError {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or("no message")
        .to_owned();
    let code = body["error"]["code"].as_str().unwrap_or("error");
    CliError::Refused(format!("{} {code}: {message}", status.as_u16()))
}

/// `text` percent-encoded for a path segment or a query value (letters,
/// digits and `-._~` stay).
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
