//! Who is calling: the one `Caller` extractor every handler uses — the authorizer's context on Lambda (JWT claims or IAM identity), a token table locally, or nobody when authentication is off.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, header};
use lambda_http::request::RequestContext;
use swarm_adapters::config::AuthMode;

use super::error::HttpError;

/// JWT claims that name the customer, first present wins (issue 10 revisits this order).
pub const CUSTOMER_CLAIMS: [&str; 3] = ["customer_id", "custom:customer_id", "sub"];

/// How callers are identified.
#[derive(Clone, Debug)]
pub enum Auth {
    /// Nobody is authenticated: the request body names the customer (`AUTH_MODE=none`, local runs).
    None,
    /// API Gateway's JWT authorizer ran: the customer from the token's claims
    /// ([`CUSTOMER_CLAIMS`]) in the request context lambda_http puts in the request's extensions.
    Jwt,
    /// IAM authorization ran: the caller's IAM user id from the request context.
    Iam,
    /// Locally: `Authorization: Bearer <token>` looked up in a token table (`swarm-local serve --auth tokens`).
    Tokens(Arc<TokenTable>),
}

impl From<AuthMode> for Auth {
    fn from(mode: AuthMode) -> Self {
        match mode {
            AuthMode::None => Self::None,
            AuthMode::Jwt => Self::Jwt,
            AuthMode::Iam => Self::Iam,
        }
    }
}

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: the body says who the customer is.
    Anonymous,
    /// An authenticated customer; requests act for this customer only.
    Customer(String),
}

impl Caller {
    /// The authenticated customer, if any.
    pub fn customer(&self) -> Option<&str> {
        match self {
            Self::Anonymous => None,
            Self::Customer(c) => Some(c),
        }
    }

    /// The customer a request acts for: the caller's own, or with
    /// authentication off the body's `customer_id`.
    /// Errors: 403 when an authenticated caller names another customer in the
    /// body; 400 `missing_customer_id` when nobody names one.
    pub fn acting_for(&self, claimed: Option<String>) -> Result<String, HttpError> {
        match (self, claimed) {
            (Self::Customer(own), Some(other)) if other.trim() != own => Err(HttpError::forbidden(
                "the request's customer_id is not the authenticated caller's; leave it out to act as yourself",
            )),
            (Self::Customer(own), _) => Ok(own.clone()),
            (Self::Anonymous, Some(claimed)) => Ok(claimed),
            (Self::Anonymous, None) => {
                Err(HttpError::bad_request("missing_customer_id", "field \"customer_id\" is required"))
            }
        }
    }
}

impl Auth {
    /// Identifies the caller from the request's headers and extensions.
    /// Errors: 401 when authentication is on and the request carries no
    /// identity, or a token the table does not know.
    pub fn identify(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Caller, HttpError> {
        match self {
            Self::None => Ok(Caller::Anonymous),
            Self::Jwt | Self::Iam => {
                let missing = || HttpError::unauthenticated("the request carries no customer identity");
                let Some(RequestContext::ApiGatewayV2(context)) = extensions.get::<RequestContext>() else {
                    return Err(missing());
                };
                let authorizer = context.authorizer.as_ref().ok_or_else(missing)?;
                let id = if matches!(self, Self::Jwt) {
                    let claims = authorizer.jwt.as_ref().map(|j| &j.claims);
                    CUSTOMER_CLAIMS.iter().find_map(|k| claims.and_then(|c| c.get(*k)).cloned())
                } else {
                    authorizer.iam.as_ref().and_then(|i| i.user_id.clone())
                };
                let id = id.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).ok_or_else(missing)?;
                Ok(Caller::Customer(id))
            }
            Self::Tokens(table) => {
                let challenge = |message: &str| HttpError::unauthenticated(message).with_challenge("Bearer");
                let value = headers
                    .get(header::AUTHORIZATION)
                    .ok_or_else(|| challenge("send Authorization: Bearer <token>"))?
                    .to_str()
                    .map_err(|_| challenge("the Authorization header is not text"))?;
                let token = value
                    .split_once(' ')
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .ok_or_else(|| challenge("the Authorization header must be Bearer <token>"))?;
                table.customer(token).map(|c| Caller::Customer(c.to_owned())).ok_or_else(|| challenge("unknown token"))
            }
        }
    }
}

/// Any router state that holds an [`Auth`] gives its handlers the [`Caller`].
impl<S> FromRequestParts<S> for Caller
where
    Auth: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Auth::from_ref(state).identify(&parts.headers, &parts.extensions)
    }
}

/// Bearer tokens of the local API, each naming one customer. `Debug` shows how many, never a token.
#[derive(Clone, Default)]
pub struct TokenTable {
    customers: HashMap<String, String>,
}

impl std::fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenTable({} tokens)", self.customers.len())
    }
}

impl TokenTable {
    /// A table from `(token, customer_id)` pairs.
    /// Errors: an empty token or customer, a token with whitespace, or a token listed twice.
    pub fn from_pairs<T: Into<String>, C: Into<String>>(
        pairs: impl IntoIterator<Item = (T, C)>,
    ) -> Result<Self, String> {
        let mut customers = HashMap::new();
        for (n, (token, customer)) in pairs.into_iter().enumerate() {
            let (token, customer): (String, String) = (token.into(), customer.into());
            if token.is_empty() || token.contains(char::is_whitespace) || customer.trim().is_empty() {
                return Err(format!("token entry {} must be <token>=<customer_id> with no blanks", n + 1));
            }
            if customers.insert(token, customer.trim().to_owned()).is_some() {
                return Err(format!("token entry {} repeats an earlier token", n + 1));
            }
        }
        Ok(Self { customers })
    }

    /// Parses one `<token>=<customer_id>` per line; blank lines and lines
    /// starting with `#` are skipped. Errors name the line, never the token.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            pairs.push(Self::entry(line).map_err(|e| format!("line {}: {e}", n + 1))?);
        }
        Self::from_pairs(pairs)
    }

    /// One `<token>=<customer_id>` entry as `(token, customer_id)`; the error never shows the token.
    pub fn entry(text: &str) -> Result<(String, String), String> {
        let (token, customer) = text.split_once('=').ok_or_else(|| "not <token>=<customer_id>".to_owned())?;
        Ok((token.trim().to_owned(), customer.trim().to_owned()))
    }

    /// The customer `token` names.
    pub fn customer(&self, token: &str) -> Option<&str> {
        self.customers.get(token).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.customers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.customers.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_with_comments_and_errors_never_show_a_token() {
        let t = TokenTable::parse("# local callers\ntok-c104-0123456789 = C104\n\ntok-c106-0123456789=C106\n").unwrap();
        assert_eq!(
            (t.customer("tok-c104-0123456789"), t.customer("tok-c106-0123456789")),
            (Some("C104"), Some("C106"))
        );
        assert_eq!(t.customer("nope"), None);
        assert_eq!(format!("{t:?}"), "TokenTable(2 tokens)");
        let e = TokenTable::parse("tok-secret-value C104").unwrap_err();
        assert_eq!(e, "line 1: not <token>=<customer_id>");
        assert!(TokenTable::parse("a=C1\na=C2").unwrap_err().contains("repeats"));
        assert!(TokenTable::parse("=C1").is_err());
    }

    #[test]
    fn an_authenticated_caller_acts_only_for_itself() {
        let me = Caller::Customer("C104".into());
        assert_eq!(me.acting_for(None).unwrap(), "C104");
        assert_eq!(me.acting_for(Some("C104".into())).unwrap(), "C104");
        assert_eq!(me.acting_for(Some("C105".into())).unwrap_err().status.as_u16(), 403);
        assert_eq!(Caller::Anonymous.acting_for(Some("C105".into())).unwrap(), "C105");
        assert_eq!(Caller::Anonymous.acting_for(None).unwrap_err().code, "missing_customer_id");
    }
}
