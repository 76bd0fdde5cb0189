//! Who is calling: the one `Caller` extractor every handler uses — the authorizer's context on Lambda (a JWT claim or the IAM caller, mapped to a customer through the table), a JWT verified in the function on the streaming URL, a token table locally, or nobody when authentication is off. Every customer id leaves here in its one canonical form.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, header};
use lambda_http::request::RequestContext;
use swarm_adapters::config::{AuthConfig, AuthMode, ClaimMapping};
use swarm_core::access::{AccessStore, Principal, PrincipalKind, canonical_customer_id};

use super::error::HttpError;
use super::tokens::TokenTable;
use crate::stream::jwt::{JwtVerifier, claim_text};

/// How callers are identified.
#[derive(Clone)]
pub enum Auth {
    /// Nobody is authenticated: the request body names the customer (`AUTH_MODE=none`, local runs).
    None,
    /// API Gateway's JWT authorizer ran: the customer from one claim of the token in the
    /// request context lambda_http puts in the request's extensions ([`JwtIdentity`]).
    Jwt(JwtIdentity),
    /// IAM authorization ran: the caller's unique id (`AIDA…`, or `AROA…:<session>` for an
    /// assumed role), mapped to a customer through the table ([`Principal::iam_candidates`]).
    Iam(Arc<dyn AccessStore>),
    /// On the streaming function URL (`NONE`: no authorizer in front): the `Authorization` bearer
    /// token verified here by the JWT authorizer's rules ([`JwtVerifier`]), then its claim mapped
    /// to a customer exactly as for [`Auth::Jwt`].
    VerifiedJwt(Arc<JwtVerifier>, JwtIdentity),
    /// Locally: `Authorization: Bearer <token>` looked up in a token table (`swarm-local serve --auth tokens`).
    Tokens(Arc<TokenTable>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("Auth::None"),
            Self::Jwt(j) => write!(f, "Auth::Jwt({:?}, {:?})", j.claim, j.mapping),
            Self::Iam(_) => f.write_str("Auth::Iam"),
            Self::VerifiedJwt(v, j) => write!(f, "Auth::VerifiedJwt({:?}, {:?}, {:?})", v.rules(), j.claim, j.mapping),
            Self::Tokens(t) => write!(f, "Auth::{t:?}"),
        }
    }
}

/// Which JWT claim names the caller, and how it becomes a customer.
#[derive(Clone)]
pub struct JwtIdentity {
    /// The claim read (`sub` by default). Only the issuer writes `sub`; a Cognito `custom:`
    /// attribute is safe only when the app client may not write it.
    pub claim: String,
    pub mapping: ClaimMapping,
    /// Where `sub:<claim value>` → customer mappings live (used with [`ClaimMapping::Table`]).
    pub directory: Arc<dyn AccessStore>,
}

impl JwtIdentity {
    /// `sub`, mapped through `directory`: the safe default.
    pub fn mapped_sub(directory: Arc<dyn AccessStore>) -> Self {
        Self { claim: "sub".into(), mapping: ClaimMapping::Table, directory }
    }
}

impl JwtIdentity {
    /// The customer named by the token's claim `value` (its [`JwtIdentity::claim`]): the value
    /// itself (`direct`), or the customer mapped to `sub:<value>` in the directory (`table`).
    /// Errors: 401 when the claim is absent or blank; 403 `unmapped_identity`; 503 when the
    /// mapping cannot be read.
    async fn customer(&self, value: Option<String>) -> Result<String, HttpError> {
        let missing = || HttpError::unauthenticated("the request carries no customer identity");
        let value = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).ok_or_else(missing)?;
        match self.mapping {
            ClaimMapping::Direct => canonical_or_unmapped(&value),
            ClaimMapping::Table => {
                let principal = Principal::new(PrincipalKind::Sub, &value).map_err(|_| missing())?;
                mapped(self.directory.as_ref(), &[principal]).await
            }
        }
    }
}

impl Auth {
    /// The configured authentication; `directory` holds the principal → customer mappings.
    pub fn from_config(config: &AuthConfig, directory: Arc<dyn AccessStore>) -> Self {
        match config.mode {
            AuthMode::None => Self::None,
            AuthMode::Jwt => Self::Jwt(JwtIdentity { claim: config.claim.clone(), mapping: config.mapping, directory }),
            AuthMode::Iam => Self::Iam(directory),
        }
    }
}

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: the body says who the customer is.
    Anonymous,
    /// An authenticated customer (canonical id); requests act for this customer only.
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

    /// The customer a request acts for, canonical: the caller's own, or with authentication
    /// off the body's `customer_id`.
    /// Errors: 400 `bad_customer_id` for a body id that has no canonical form; 403 when an
    /// authenticated caller names another customer in the body (compared canonically, so
    /// `c104` is C104); 400 `missing_customer_id` when nobody names one.
    pub fn acting_for(&self, claimed: Option<String>) -> Result<String, HttpError> {
        let claimed = claimed
            .map(|c| canonical_customer_id(&c))
            .transpose()
            .map_err(|e| HttpError::bad_request("bad_customer_id", e.to_string()))?;
        match (self, claimed) {
            (Self::Customer(own), Some(other)) if &other != own => Err(HttpError::forbidden(
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

/// 401 with a `WWW-Authenticate: Bearer` challenge.
pub(super) fn challenge(message: &str) -> HttpError {
    HttpError::unauthenticated(message).with_challenge("Bearer")
}

/// The token of the `Authorization` header: `Bearer <token>` (the scheme in any case), or with
/// `bare_ok` the token alone too. Errors: 401 with a `Bearer` challenge when the header is absent
/// (`missing` says what to send), not text, or without `bare_ok` not `Bearer <token>`.
pub(super) fn bearer_token<'h>(headers: &'h HeaderMap, missing: &str, bare_ok: bool) -> Result<&'h str, HttpError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| challenge(missing))?
        .to_str()
        .map_err(|_| challenge("the Authorization header is not text"))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Ok(token.trim()),
        _ if bare_ok => Ok(value.trim()),
        _ => Err(challenge("the Authorization header must be Bearer <token>")),
    }
}

/// 403: the credentials are valid but name no customer of ours.
fn unmapped() -> HttpError {
    HttpError::new(
        axum::http::StatusCode::FORBIDDEN,
        "unmapped_identity",
        "no customer is linked to this identity; ask an administrator to map it",
    )
}

/// A stored or claimed customer id in canonical form; one that has none is a broken mapping (403).
fn canonical_or_unmapped(id: &str) -> Result<String, HttpError> {
    canonical_customer_id(id).map_err(|_| {
        tracing::warn!("an identity maps to a value that is not a customer id");
        unmapped()
    })
}

/// The first mapped customer of `candidates`, in order.
async fn mapped(directory: &dyn AccessStore, candidates: &[Principal]) -> Result<String, HttpError> {
    for principal in candidates {
        match directory.customer_for(principal).await {
            Ok(Some(customer)) => return canonical_or_unmapped(&customer),
            Ok(None) => continue,
            Err(e) => {
                tracing::error!(error = %e, "identity lookup failed");
                return Err(HttpError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the caller's identity could not be looked up; try again",
                ));
            }
        }
    }
    tracing::info!(principal = %candidates.first().map(ToString::to_string).unwrap_or_default(), "unmapped identity refused");
    Err(unmapped())
}

impl Auth {
    /// Identifies the caller from the request's headers and extensions.
    /// Errors: 401 when authentication is on and the request carries no identity, or a token
    /// the table does not know; 403 `unmapped_identity` for an identity no customer is mapped
    /// to; 503 when the mapping cannot be read.
    pub async fn identify(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Caller, HttpError> {
        let missing = || HttpError::unauthenticated("the request carries no customer identity");
        let authorizer = || {
            let Some(RequestContext::ApiGatewayV2(context)) = extensions.get::<RequestContext>() else {
                return None;
            };
            context.authorizer.clone()
        };
        match self {
            Self::None => Ok(Caller::Anonymous),
            Self::Jwt(jwt) => {
                let authorizer = authorizer().ok_or_else(missing)?;
                let value = authorizer.jwt.as_ref().and_then(|j| j.claims.get(&jwt.claim)).cloned();
                Ok(Caller::Customer(jwt.customer(value).await?))
            }
            Self::VerifiedJwt(verifier, jwt) => {
                // API Gateway's JWT authorizer takes the header's token with or without `Bearer `.
                let token = bearer_token(headers, "send Authorization: Bearer <token>", true)?;
                let claims = verifier.verify(token).await.map_err(|e| {
                    if e.is_transient() {
                        tracing::error!(error = %e, "a token could not be verified");
                        HttpError::new(
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "unavailable",
                            "the token issuer's keys could not be read; try again",
                        )
                    } else {
                        tracing::info!(reason = %e, "a token was refused");
                        challenge("the token is not valid for this API")
                    }
                })?;
                Ok(Caller::Customer(jwt.customer(claim_text(&claims, &jwt.claim)).await?))
            }
            Self::Iam(directory) => {
                let authorizer = authorizer().ok_or_else(missing)?;
                let user_id = authorizer.iam.as_ref().and_then(|i| i.user_id.clone()).ok_or_else(missing)?;
                let candidates = Principal::iam_candidates(&user_id).map_err(|_| missing())?;
                Ok(Caller::Customer(mapped(directory.as_ref(), &candidates).await?))
            }
            Self::Tokens(table) => {
                let token = bearer_token(headers, "send Authorization: Bearer <token>", false)?;
                table.holder(token).map(|c| Caller::Customer(c.to_owned())).ok_or_else(|| challenge("unknown token"))
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
        Auth::from_ref(state).identify(&parts.headers, &parts.extensions).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn an_authenticated_caller_acts_only_for_itself() {
        let me = Caller::Customer("C104".into());
        assert_eq!(me.acting_for(None).unwrap(), "C104");
        assert_eq!(me.acting_for(Some("C104".into())).unwrap(), "C104");
        assert_eq!(me.acting_for(Some(" c104".into())).unwrap(), "C104", "one canonical form");
        assert_eq!(me.acting_for(Some("C105".into())).unwrap_err().status.as_u16(), 403);
        assert_eq!(me.acting_for(Some("C1#META".into())).unwrap_err().code, "bad_customer_id");
        assert_eq!(Caller::Anonymous.acting_for(Some("c105".into())).unwrap(), "C105");
        assert_eq!(Caller::Anonymous.acting_for(None).unwrap_err().code, "missing_customer_id");
    }
}
