//! Who may decide approvals: the `Operator` extractor of the approvals routes — an IAM caller on AWS (the routes use AWS_IAM authorization, whatever customers use), a configured token locally — never a customer's credential.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, header};
use lambda_http::request::RequestContext;

use super::error::HttpError;
use super::tokens::TokenTable;

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
    Tokens(Arc<TokenTable>),
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
                    .holder(token)
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
            OperatorAuth::Tokens(Arc::new(TokenTable::operators([("op-token-0123456789", "alice")]).unwrap()));
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
        assert!(TokenTable::operators([("short", "bob")]).is_err());
        assert_eq!(
            format!("{:?}", TokenTable::operators([("op-token-0123456789", "a")]).unwrap()),
            "TokenTable(1 tokens)"
        );
        assert_eq!(
            OperatorAuth::Nobody.identify(&with("Bearer op-token-0123456789"), &ext).unwrap_err().status.as_u16(),
            401
        );
    }
}
