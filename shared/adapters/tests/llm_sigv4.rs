//! Amazon Bedrock natively: `LLM_AUTH=sigv4` needs no key (and refuses one beside it), finds the region in Bedrock's host, and signs each chat-completions request with the function's credentials — checked by a stand-in Bedrock endpoint that re-signs what arrived, as AWS does, and refuses anything else with 403.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_credential_types::Credentials;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use swarm_adapters::llm::config::{LlmConfig, LlmEndpoint};
use swarm_adapters::llm::{BEDROCK_SIGNING_SERVICE, HttpChatModel, LlmAuth, Preset};
use swarm_adapters::sigv4::{SigV4Signer, verify};
use swarm_core::llm::pricing::PriceTable;
use swarm_core::ports::{ChatMessage, ChatModel, ChatRequest, LlmError, Purpose};

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |k| map.get(k).cloned()
}

const BEDROCK: (&str, &str) = ("LLM_BASE_URL", "https://bedrock-runtime.us-west-2.amazonaws.com/openai/v1");
const MODEL: (&str, &str) = ("LLM_MODEL", "openai.gpt-oss-120b-1:0");

#[test]
fn sigv4_needs_no_key_takes_the_region_of_bedrock_s_host_and_refuses_a_key_beside_it() -> Result<()> {
    let c = LlmConfig::from_lookup(lookup(&[BEDROCK, MODEL, ("LLM_AUTH", "sigv4"), ("AWS_REGION", "eu-west-1")]))?;
    assert_eq!(c.auth, LlmAuth::SigV4 { region: "us-west-2".into() }, "the endpoint's region wins");
    assert_eq!((c.main.api_key.is_none(), c.key_secret.clone()), (true, None));
    assert_eq!(c.main.profile.preset, Preset::Bedrock);
    swarm_adapters::llm::build_models(&c)?;
    let mantle = ("LLM_BASE_URL", "https://bedrock-mantle.ap-northeast-1.api.aws/v1");
    let c = LlmConfig::from_lookup(lookup(&[mantle, MODEL, ("LLM_AUTH", "SIGV4")]))?;
    assert_eq!(c.auth, LlmAuth::SigV4 { region: "ap-northeast-1".into() });
    let gateway = ("LLM_BASE_URL", "https://llm-gw.internal.example.com/v1");
    let c = LlmConfig::from_lookup(lookup(&[gateway, MODEL, ("LLM_AUTH", "sigv4"), ("AWS_REGION", "eu-west-1")]))?;
    assert_eq!(c.auth, LlmAuth::SigV4 { region: "eu-west-1".into() }, "else AWS_REGION");

    let e = LlmConfig::from_lookup(lookup(&[gateway, MODEL, ("LLM_AUTH", "sigv4")])).err().context("no region")?;
    assert!(e.to_string().starts_with("LLM_AUTH: sigv4 needs a region"), "{e}");
    let e = LlmConfig::from_lookup(lookup(&[
        BEDROCK,
        MODEL,
        ("LLM_AUTH", "sigv4"),
        ("LLM_API_KEY", "bedrock-api-key-0123"),
    ]))
    .err()
    .context("two credentials")?;
    assert!(e.to_string().starts_with("LLM_API_KEY: set together with LLM_AUTH=sigv4"), "{e}");
    assert!(!e.to_string().contains("bedrock-api-key-0123"));
    let e = LlmConfig::from_lookup(lookup(&[BEDROCK, MODEL, ("LLM_AUTH", "iam")])).err().context("unknown")?;
    assert_eq!(e.to_string(), r#"LLM_AUTH: "iam" is not bearer or sigv4"#);
    // Bearer stays the default: Bedrock with an API key, as any provider.
    let c = LlmConfig::from_lookup(lookup(&[BEDROCK, MODEL, ("LLM_API_KEY", "bedrock-api-key-0123")]))?;
    assert_eq!(c.auth, LlmAuth::Bearer);
    Ok(())
}

fn role() -> Credentials {
    Credentials::new("ASIAWORKERROLE", "worker-role-secret", Some("session-1".into()), None, "test")
}

/// Bedrock as AWS runs it: a request whose signature does not verify never reaches the model.
async fn bedrock(State(verifier): State<SigV4Signer>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
    let token = parts.headers.get("x-amz-security-token").and_then(|v| v.to_str().ok());
    if !verify(&verifier, &role(), &parts, &body, Duration::from_secs(300)) || token != Some("session-1") {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(json!({"message": "The request signature we calculated does not match"})),
        )
            .into_response();
    }
    axum::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "openai.gpt-oss-120b-1:0",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "signed and answered"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    }))
    .into_response()
}

fn request() -> ChatRequest {
    ChatRequest {
        purpose: Purpose::Work,
        messages: vec![ChatMessage::User { content: "hello".into() }],
        tools: vec![],
        max_tokens: Some(64),
        tool_choice: Default::default(),
    }
}

#[tokio::test]
async fn each_request_is_signed_with_the_role_and_a_wrong_key_is_refused_as_permanent() -> Result<()> {
    let verifier = SigV4Signer::with_credentials(BEDROCK_SIGNING_SERVICE, "us-west-2", role());
    let app = axum::Router::new().fallback(bedrock).with_state(verifier);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/openai/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let endpoint = LlmEndpoint::new(base, None, "openai.gpt-oss-120b-1:0");
    let model = |credentials: Credentials| -> Result<HttpChatModel> {
        let signer = SigV4Signer::with_credentials(BEDROCK_SIGNING_SERVICE, "us-west-2", credentials);
        Ok(HttpChatModel::new(&endpoint, Duration::from_secs(10), 4, PriceTable::with_defaults())?.signed(signer))
    };
    let answer = model(role())?.complete(&request()).await?;
    assert_eq!(answer.content.as_deref(), Some("signed and answered"));
    assert_eq!(answer.usage.prompt_tokens, Some(9));
    // Twice: a fresh signature each time (the verifier checks the date too).
    model(role())?.complete(&request()).await?;

    let stolen = Credentials::new("ASIAWORKERROLE", "guessed-secret", Some("session-1".into()), None, "t");
    let refused = model(stolen)?.complete(&request()).await.err().context("a wrong key is refused")?;
    assert!(matches!(refused, LlmError::Permanent { status: 403, .. }), "{refused:?}");
    Ok(())
}
