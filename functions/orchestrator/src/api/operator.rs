//! Who may decide approvals: the `Operator` extractor of the approvals routes — an IAM caller on AWS (the routes use AWS_IAM authorization, whatever customers use), a configured token locally — never a customer's credential.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, header};
use lambda_http::request::RequestContext;

use super::error::HttpError;

/// Operators' bearer tokens, each naming one operator (recorded as `decided_by`). Not the
/// customers' table: a customer token is never an operator's. `Debug` shows how many, never a token.
#[derive(Clone, Default)]
pub struct OperatorTable {
    names: HashMap<String, String>,
}

impl std::fmt::Debug for OperatorTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OperatorTable({} tokens)", self.names.len())
    }
}

impl OperatorTable {
    /// A table from `(token, name)` pairs.
    /// Errors: an empty token or name, blanks in either, a token shorter than 16 characters, or a
    /// token listed twice (the message never shows a token).
    pub fn from_pairs<T: Into<String>, N: Into<String>>(
        pairs: impl IntoIterator<Item = (T, N)>,
    ) -> Result<Self, String> {
        let mut names = HashMap::new();
        for (n, (token, name)) in pairs.into_iter().enumerate() {
            let (token, name): (String, String) = (token.into(), name.into());
            let name = name.trim().to_owned();
            if token.len() < 16
                || token.contains(char::is_whitespace)
                || name.is_empty()
                || name.contains(char::is_whitespace)
            {
                return Err(format!(
                    "operator token entry {} must be <token>=<name>: a token of at least 16 characters and a name, no blanks",
                    n + 1
                ));
            }
            if names.insert(token, name).is_some() {
                return Err(format!("operator token entry {} repeats an earlier token", n + 1));
            }
        }
        Ok(Self { names })
    }

    /// The operator `token` names.
    pub fn name(&self, token: &str) -> Option<&str> {
        self.names.get(token).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// How operators are identified on the approvals routes.
#[derive(Clone, Debug)]
pub enum OperatorAuth {
    /// Nobody may decide (approvals are off): every request answers 401.
    Nobody,
    /// API Gateway's IAM authorization ran on the route: the operator is the signed caller's IAM ARN
    /// (who may invoke the route is IAM policy: `execute-api:Invoke` on the approvals routes).
    Iam,
    /// Locally: `Authorization: Bearer <token>` looked up in the operators' own table
    /// (`swarm-local serve --operator-token <token>=<name>`), never the customers'.
    Tokens(Arc<OperatorTable>),
}

/// The operator of one request, as recorded with a decision (`decided_by`): an IAM ARN or a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator(pub String);

impl OperatorAuth {
    /// Identifies the operator.
    /// Errors: 401 without an operator credential (a customer's is not one).
    pub fn identify(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Operator, HttpError> {
        match self {
            Self::Nobody => {
                Err(HttpError::unauthenticated("approvals need an operator credential; none is configured"))
            }
            Self::Iam => {
                let missing = || HttpError::unauthenticated("approvals need an IAM-signed operator request");
                let Some(RequestContext::ApiGatewayV2(context)) = extensions.get::<RequestContext>() else {
                    return Err(missing());
                };
                let iam = context.authorizer.as_ref().and_then(|a| a.iam.as_ref()).ok_or_else(missing)?;
                let who = iam.user_arn.clone().or_else(|| iam.caller_id.clone()).filter(|w| !w.trim().is_empty());
                who.map(Operator).ok_or_else(missing)
            }
            Self::Tokens(table) => {
                let challenge = |message: &str| HttpError::unauthenticated(message).with_challenge("Bearer");
                let value = headers
                    .get(header::AUTHORIZATION)
                    .ok_or_else(|| challenge("approvals need Authorization: Bearer <operator token>"))?
                    .to_str()
                    .map_err(|_| challenge("the Authorization header is not text"))?;
                let token = value
                    .split_once(' ')
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .ok_or_else(|| challenge("the Authorization header must be Bearer <token>"))?;
                table
                    .name(token)
                    .map(|name| Operator(name.to_owned()))
                    .ok_or_else(|| challenge("not an operator token"))
            }
        }
    }
}

/// Any router state that holds an [`OperatorAuth`] gives its approvals handlers the [`Operator`].
impl<S> FromRequestParts<S> for Operator
where
    OperatorAuth: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        OperatorAuth::from_ref(state).identify(&parts.headers, &parts.extensions)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn only_an_operator_token_identifies_an_operator() {
        let operators =
            OperatorAuth::Tokens(Arc::new(OperatorTable::from_pairs([("op-token-0123456789", "alice")]).unwrap()));
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        let ext = Extensions::new();
        assert_eq!(operators.identify(&with("Bearer op-token-0123456789"), &ext).unwrap(), Operator("alice".into()));
        assert_eq!(operators.identify(&with("Bearer customer-token"), &ext).unwrap_err().status.as_u16(), 401);
        assert_eq!(operators.identify(&HeaderMap::new(), &ext).unwrap_err().status.as_u16(), 401);
        assert_eq!(OperatorAuth::Iam.identify(&HeaderMap::new(), &ext).unwrap_err().status.as_u16(), 401);
        assert!(OperatorTable::from_pairs([("short", "bob")]).is_err());
        assert_eq!(
            format!("{:?}", OperatorTable::from_pairs([("op-token-0123456789", "a")]).unwrap()),
            "OperatorTable(1 tokens)"
        );
        assert_eq!(
            OperatorAuth::Nobody.identify(&with("Bearer op-token-0123456789"), &ext).unwrap_err().status.as_u16(),
            401
        );
    }
}
