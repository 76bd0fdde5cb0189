//! IAM on the emulator (`infra/aws/moto_server.py --iam`): one IAM user per function with its role's policies from `template.yaml` (`infra/aws/iam-policies.json`, the translator's expansion), the run's ARNs put in place of the template's names, and an access key each function signs with; the emulator's administrator signs what the platform itself does (provisioning, the stream readers, the mappings' receives, teardown).
//!
//! The IAM calls are the Query API (form-encoded `POST /`, SigV4 for service `iam`), signed by the
//! SDK's signer: three per user, so no IAM SDK is linked for them.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use aws_sdk_dynamodb::config::Credentials;
use serde_json::Value;
use swarm_adapters::mcp::sigv4::SigV4Signer;

/// The emulator's administrator (created by `moto_server.py --iam` before its first request;
/// emulator-only values that no AWS account knows).
pub const ADMIN_KEY_ID: &str = "AKIAEMULATORADMIN000";
pub const ADMIN_SECRET: &str = "emulator-admin-secret-not-for-aws";

/// Each function's role policies as `template.yaml` grants them, resources by logical id
/// (`${TasksQueue.Arn}`); written by `infra/aws/iam_policies.py`, checked current by `infra/aws/lint.sh`.
const POLICIES: &str = include_str!("../../../aws/iam-policies.json");

/// Longest wait for one IAM call.
const IAM_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The administrator's credentials.
pub fn admin_credentials() -> Credentials {
    Credentials::new(ADMIN_KEY_ID, ADMIN_SECRET, None, None, "emulator-admin")
}

/// The functions `iam-policies.json` holds policies for (template logical ids).
pub fn functions() -> anyhow::Result<Vec<String>> {
    let all: Value = serde_json::from_str(POLICIES).context("iam-policies.json is not JSON")?;
    Ok(all.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default())
}

/// `function`'s policy documents `(name, JSON)`, each `${Name}` or `${Name.Attribute}` replaced by
/// the run's ARN in `arns` (the table, its stream, the queues), any other by an ARN that names
/// nothing on the emulator (log groups, secrets, functions: services a run never calls).
///
/// Errors: no policies for `function`.
pub fn policy_documents(function: &str, arns: &HashMap<String, String>) -> anyhow::Result<Vec<(String, String)>> {
    let all: Value = serde_json::from_str(POLICIES).context("iam-policies.json is not JSON")?;
    let policies = all[function]["policies"]
        .as_object()
        .with_context(|| format!("iam-policies.json holds no policies for {function}"))?;
    Ok(policies.iter().map(|(name, doc)| (name.clone(), resolve(doc, arns).to_string())).collect())
}

/// `value` with every `${…}` of its strings replaced ([`policy_documents`]).
fn resolve(value: &Value, arns: &HashMap<String, String>) -> Value {
    match value {
        Value::String(s) => Value::String(substitute(s, arns)),
        Value::Array(items) => Value::Array(items.iter().map(|v| resolve(v, arns)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), resolve(v, arns))).collect()),
        other => other.clone(),
    }
}

fn substitute(text: &str, arns: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else { break };
        let name = &rest[start + 2..start + len];
        out.push_str(&rest[..start]);
        match arns.get(name) {
            Some(arn) => out.push_str(arn),
            None => {
                out.push_str(&format!("arn:aws:iam::000000000000:policy/not-provisioned/{}", name.replace('.', "-")))
            }
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// The IAM users a run created, for teardown.
pub struct FunctionUsers {
    iam: IamClient,
    users: Vec<String>,
}

impl FunctionUsers {
    /// A user `<prefix>-<function>` for each of `functions`, with its policies over `arns`, and its
    /// access key. Errors: an IAM call refused or unanswered (is the emulator started with `--iam`?).
    pub async fn create(
        endpoint: &str,
        region: &str,
        prefix: &str,
        functions: &[String],
        arns: &HashMap<String, String>,
    ) -> anyhow::Result<(Self, HashMap<String, Credentials>)> {
        let iam = IamClient::new(endpoint, region)?;
        let mut this = Self { iam, users: Vec::new() };
        let mut keys = HashMap::new();
        for function in functions {
            let user = format!("{prefix}-{function}");
            this.iam.call(&[("Action", "CreateUser"), ("UserName", &user)]).await?;
            this.users.push(user.clone());
            for (name, document) in policy_documents(function, arns)? {
                let put = [("Action", "PutUserPolicy"), ("UserName", &user), ("PolicyName", &name)];
                this.iam.call(&[&put[..], &[("PolicyDocument", document.as_str())]].concat()).await?;
            }
            let answer = this.iam.call(&[("Action", "CreateAccessKey"), ("UserName", &user)]).await?;
            let id = element(&answer, "AccessKeyId").context("CreateAccessKey answered no AccessKeyId")?;
            let secret = element(&answer, "SecretAccessKey").context("CreateAccessKey answered no SecretAccessKey")?;
            keys.insert(function.clone(), Credentials::new(id, secret, None, None, "emulator-function"));
        }
        Ok((this, keys))
    }

    /// Deletes the users `<prefix>-<function>` of `functions` that exist (a killed run's, before a
    /// restart makes them again); a missing one is skipped, a failure logged.
    /// Errors: the IAM client cannot be built.
    pub async fn delete_named(endpoint: &str, region: &str, prefix: &str, functions: &[String]) -> anyhow::Result<()> {
        let iam = IamClient::new(endpoint, region)?;
        for function in functions {
            let user = format!("{prefix}-{function}");
            if iam.call(&[("Action", "GetUser"), ("UserName", &user)]).await.is_ok() {
                Self { iam: IamClient::new(endpoint, region)?, users: vec![user] }.delete().await;
            }
        }
        Ok(())
    }

    /// Deletes every user (its keys and policies first); failures are logged.
    pub async fn delete(&self) {
        for user in &self.users {
            if let Err(e) = self.delete_user(user).await {
                tracing::warn!(user, error = %e, "could not delete an IAM user of the run");
            }
        }
    }

    async fn delete_user(&self, user: &str) -> anyhow::Result<()> {
        let keys = self.iam.call(&[("Action", "ListAccessKeys"), ("UserName", user)]).await?;
        for id in elements(&keys, "AccessKeyId") {
            self.iam.call(&[("Action", "DeleteAccessKey"), ("UserName", user), ("AccessKeyId", &id)]).await?;
        }
        let policies = self.iam.call(&[("Action", "ListUserPolicies"), ("UserName", user)]).await?;
        for name in elements(&policies, "member") {
            self.iam.call(&[("Action", "DeleteUserPolicy"), ("UserName", user), ("PolicyName", &name)]).await?;
        }
        self.iam.call(&[("Action", "DeleteUser"), ("UserName", user)]).await?;
        Ok(())
    }
}

/// The IAM Query API of the emulator, signed by the administrator.
struct IamClient {
    url: String,
    http: reqwest::Client,
    signer: SigV4Signer,
}

impl IamClient {
    fn new(endpoint: &str, region: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().timeout(IAM_CALL_TIMEOUT).build()?;
        let signer = SigV4Signer::with_credentials("iam", region, admin_credentials());
        Ok(Self { url: format!("{}/", endpoint.trim_end_matches('/')), http, signer })
    }

    /// One call (`Action` among `params`); answers the XML body. Error: a refusal, with its code and message.
    async fn call(&self, params: &[(&str, &str)]) -> anyhow::Result<String> {
        let mut body: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect();
        body.push("Version=2010-05-08".into());
        let body = body.join("&");
        let action = params.iter().find(|(k, _)| *k == "Action").map_or("?", |(_, v)| *v);
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
            .body(body.clone());
        for (name, value) in self.signer.sign("POST", &self.url, &[], body.as_bytes()).await? {
            request = request.header(name, value);
        }
        let response = request.send().await.with_context(|| format!("IAM {action} on {}", self.url))?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            let code = element(&text, "Code").unwrap_or_default();
            let message = element(&text, "Message").unwrap_or_default();
            anyhow::bail!("IAM {action} answered {status}: {code} {message}");
        }
        Ok(text)
    }
}

/// The text of the first `<tag>…</tag>` of an XML answer.
fn element(xml: &str, tag: &str) -> Option<String> {
    elements(xml, tag).into_iter().next()
}

/// The texts of every `<tag>…</tag>` of an XML answer.
fn elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(after[..end].trim().to_owned());
        rest = &after[end + close.len()..];
    }
    out
}

/// `application/x-www-form-urlencoded` (RFC 3986 unreserved characters kept).
fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn the_runs_arns_replace_the_templates_names_and_the_rest_names_nothing() {
        let arns: HashMap<String, String> = [
            ("Table.Arn".to_owned(), "arn:aws:dynamodb:us-east-1:123456789012:table/t".to_owned()),
            ("TasksQueue.Arn".to_owned(), "arn:aws:sqs:us-east-1:123456789012:t-tasks".to_owned()),
            ("RefundQueue.Arn".to_owned(), "arn:aws:sqs:us-east-1:123456789012:t-refund".to_owned()),
        ]
        .into();
        let docs = policy_documents("Sweeper", &arns).unwrap();
        let text = docs.iter().map(|(_, d)| d.as_str()).collect::<String>();
        assert!(text.contains(r#""arn:aws:dynamodb:us-east-1:123456789012:table/t/index/sweep""#), "{text}");
        assert!(!text.contains("${"), "{text}");
        assert!(text.contains("arn:aws:iam::000000000000:policy/not-provisioned/SweeperLogGroup-Arn"), "{text}");
        // The sweeper sends only approved refunds not run, re-issued, to the refund queue.
        assert!(!text.contains(r#""arn:aws:sqs:us-east-1:123456789012:t-tasks""#), "{text}");
        let sends: Vec<Value> = policy_documents("DlqConsumer", &arns)
            .unwrap()
            .into_iter()
            .flat_map(|(_, d)| serde_json::from_str::<Value>(&d).unwrap()["Statement"].as_array().cloned().unwrap())
            .filter(|st| st["Action"] == "sqs:SendMessage")
            .map(|st| st["Resource"].clone())
            .collect();
        // Deadlines and dependents to the tasks queue; a dead-lettered confirmation back to the refund queue.
        assert_eq!(
            sends,
            [
                Value::from("arn:aws:sqs:us-east-1:123456789012:t-tasks"),
                Value::from("arn:aws:sqs:us-east-1:123456789012:t-refund")
            ]
        );
        assert!(policy_documents("NoSuchFunction", &arns).is_err());
        assert!(functions().unwrap().contains(&"RefundWorker".to_owned()));
    }

    #[test]
    fn xml_elements_and_form_values_are_read_and_written_as_the_query_api_does() {
        let xml = "<R><AccessKey><AccessKeyId>AKIA1</AccessKeyId><SecretAccessKey>s/2+</SecretAccessKey></AccessKey>\
                   <PolicyNames><member>a</member><member>b</member></PolicyNames></R>";
        assert_eq!(element(xml, "AccessKeyId").as_deref(), Some("AKIA1"));
        assert_eq!(elements(xml, "member"), ["a", "b"]);
        assert_eq!(element(xml, "Missing"), None);
        assert_eq!(form_encode(r#"{"a": "b*"}"#), "%7B%22a%22%3A%20%22b%2A%22%7D");
    }
}
