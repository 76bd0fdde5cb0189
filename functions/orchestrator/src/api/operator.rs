//! Who may decide approvals: the `Operator` extractor of the approvals routes — on AWS an IAM caller the operators' allowlist names and no customer is mapped to (the routes use AWS_IAM authorization, whatever customers use), a configured token locally — never a customer's credential.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, StatusCode};
use lambda_http::request::RequestContext;
use swarm_core::access::{AccessStore, Principal};

use super::caller::{bearer_token, challenge};
use super::error::HttpError;
use super::tokens::TokenTable;

/// How operators are identified on the approvals routes.
#[derive(Clone, Debug)]
pub enum OperatorAuth {
    /// Nobody may decide (approvals are off): every request answers 401.
    Nobody,
    /// API Gateway's IAM authorization ran on the route: the operator is a signed caller whose ARN
    /// the allowlist names and whose principal no customer is mapped to ([`IamOperators`]). IAM
    /// policy (`execute-api:Invoke`) only says who may reach the route.
    Iam(IamOperators),
    /// Locally: `Authorization: Bearer <token>` looked up in the operators' own table
    /// (`swarm-local serve --operator-token <token>=<name>`), never the customers'.
    Tokens(Arc<TokenTable>),
}

/// One entry of the operators' allowlist.
#[derive(Clone, Debug, PartialEq, Eq)]
enum OperatorArn {
    /// An IAM user (`arn:aws:iam::<account>:user/<name>`), or one session of a role
    /// (`arn:aws:sts::<account>:assumed-role/<role>/<session>`): the caller's ARN, exactly.
    Exact(String),
    /// An IAM role (`arn:aws:iam::<account>:role/<path>/<name>`): every session of it, whose caller
    /// ARN is `arn:<partition>:sts::<account>:assumed-role/<name>/<session>` (the path is not in it).
    RoleSessions { prefix: String },
}

impl OperatorArn {
    fn parse(arn: &str) -> Result<Self, String> {
        let bad = || format!("{arn:?} is not an IAM user, role or assumed-role ARN");
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let [scheme, partition, service, region, account, resource] = parts[..] else { return Err(bad()) };
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        if scheme != "arn" || partition.is_empty() || !region.is_empty() || !account_ok {
            return Err(bad());
        }
        let name_ok = |n: &str| !n.is_empty() && !n.contains('*');
        match (service, resource.split_once('/')) {
            ("iam", Some(("user", name))) if name_ok(name) => Ok(Self::Exact(arn.to_owned())),
            ("iam", Some(("role", path))) if name_ok(path) => {
                let name = path.rsplit('/').next().unwrap_or(path);
                Ok(Self::RoleSessions { prefix: format!("arn:{partition}:sts::{account}:assumed-role/{name}/") })
            }
            ("sts", Some(("assumed-role", rest))) if rest.split('/').filter(|p| name_ok(p)).count() == 2 => {
                Ok(Self::Exact(arn.to_owned()))
            }
            _ => Err(bad()),
        }
    }

    fn admits(&self, caller_arn: &str) -> bool {
        match self {
            Self::Exact(arn) => arn == caller_arn,
            Self::RoleSessions { prefix } => caller_arn
                .strip_prefix(prefix.as_str())
                .is_some_and(|session| !session.is_empty() && !session.contains('/')),
        }
    }
}

/// The operators of the approvals API on AWS: the IAM principals `OPERATOR_PRINCIPALS` names (users,
/// roles — every session —, or single role sessions), minus any principal a customer is mapped to.
/// An empty allowlist lets nobody decide.
#[derive(Clone)]
pub struct IamOperators {
    allowed: Arc<[OperatorArn]>,
    directory: Arc<dyn AccessStore>,
}

impl std::fmt::Debug for IamOperators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IamOperators({} allowed)", self.allowed.len())
    }
}

/// The operators' allowlist as configured (`OPERATOR_PRINCIPALS`): parsed, not yet bound to a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorAllowlist(Vec<OperatorArn>);

impl OperatorAllowlist {
    /// IAM ARNs separated by commas (blank: nobody).
    /// Errors: the first entry that is not an IAM user, role or assumed-role ARN (wildcards are refused).
    pub fn parse(text: &str) -> Result<Self, String> {
        text.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(OperatorArn::parse)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IamOperators {
    /// The principals of `allowlist`; `directory` holds the principal → customer mappings.
    pub fn new(allowlist: &OperatorAllowlist, directory: Arc<dyn AccessStore>) -> Self {
        Self { allowed: allowlist.0.clone().into(), directory }
    }

    /// The operator behind an IAM-authorized request: its ARN when the allowlist names it and no
    /// customer is mapped to its principal.
    /// Errors: 401 without an IAM caller; 403 for a customer's principal or one not on the list;
    /// 503 when the mappings cannot be read.
    async fn identify(&self, extensions: &Extensions) -> Result<Operator, HttpError> {
        let missing = || HttpError::unauthenticated("approvals need an IAM-signed operator request");
        let Some(RequestContext::ApiGatewayV2(context)) = extensions.get::<RequestContext>() else {
            return Err(missing());
        };
        let iam = context.authorizer.as_ref().and_then(|a| a.iam.as_ref()).ok_or_else(missing)?;
        let arn = iam.user_arn.clone().filter(|w| !w.trim().is_empty()).ok_or_else(missing)?;
        let user_id = iam.user_id.as_deref().filter(|u| !u.trim().is_empty()).ok_or_else(missing)?;
        // A customer's principal is never an operator, whatever the list or IAM grants it.
        for principal in Principal::iam_candidates(user_id).map_err(|_| missing())? {
            match self.directory.customer_for(&principal).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    tracing::warn!(principal = %principal, "a customer's principal asked to decide approvals; refused");
                    return Err(not_an_operator());
                }
                Err(e) => {
                    tracing::error!(error = %e, "identity lookup failed");
                    return Err(HttpError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the caller's identity could not be looked up; try again",
                    ));
                }
            }
        }
        if !self.allowed.iter().any(|a| a.admits(&arn)) {
            tracing::warn!(caller = %arn, "a signed caller not on the operators' list asked to decide approvals; refused");
            return Err(not_an_operator());
        }
        Ok(Operator(arn))
    }
}

/// 403: signed, but not one of the configured operators (or a customer).
fn not_an_operator() -> HttpError {
    HttpError::new(
        StatusCode::FORBIDDEN,
        "not_an_operator",
        "approvals are decided by the configured operators only (OperatorPrincipalArns)",
    )
}

/// The operator of one request, as recorded with a decision (`decided_by`): an IAM ARN or a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator(pub String);

impl OperatorAuth {
    /// Identifies the operator.
    /// Errors: 401 without an operator credential (a customer's is not one); 403 for an IAM caller
    /// that is not a configured operator ([`IamOperators`]); 503 when the mappings cannot be read.
    pub async fn identify(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Operator, HttpError> {
        match self {
            Self::Nobody => {
                Err(HttpError::unauthenticated("approvals need an operator credential; none is configured"))
            }
            Self::Iam(operators) => operators.identify(extensions).await,
            Self::Tokens(table) => {
                let token = bearer_token(headers, "approvals need Authorization: Bearer <operator token>", false)?;
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
        OperatorAuth::from_ref(state).identify(&parts.headers, &parts.extensions).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_names_users_roles_and_sessions_never_wildcards() {
        let list = OperatorAllowlist::parse(
            " arn:aws:iam::123456789012:user/ops-lead, arn:aws:iam::123456789012:role/team/approvers ,\
             arn:aws:sts::123456789012:assumed-role/oncall/bob",
        )
        .unwrap();
        let admits = |arn: &str| list.0.iter().any(|a| a.admits(arn));
        assert!(admits("arn:aws:iam::123456789012:user/ops-lead"));
        assert!(admits("arn:aws:sts::123456789012:assumed-role/approvers/alice"), "any session of the role");
        assert!(admits("arn:aws:sts::123456789012:assumed-role/oncall/bob"));
        for not in [
            "arn:aws:iam::123456789012:user/ops-lead-2",
            "arn:aws:sts::123456789012:assumed-role/approvers-x/alice",
            "arn:aws:sts::999999999999:assumed-role/approvers/alice",
            "arn:aws:sts::123456789012:assumed-role/approvers/",
            "arn:aws:sts::123456789012:assumed-role/oncall/mallory",
            "arn:aws:iam::123456789012:role/team/approvers",
        ] {
            assert!(!admits(not), "{not}");
        }
        for bad in [
            "*",
            "arn:aws:iam::123456789012:user/*",
            "arn:aws:iam::123456789012:group/ops",
            "arn:aws:iam::1234:user/x",
            "arn:aws:s3:::bucket",
        ] {
            assert!(OperatorAllowlist::parse(bad).is_err(), "{bad}");
        }
        assert!(OperatorAllowlist::parse(" , ").unwrap().is_empty());
    }

    #[tokio::test]
    async fn only_an_operator_token_identifies_an_operator() {
        let operators =
            OperatorAuth::Tokens(Arc::new(TokenTable::operators([("op-token-0123456789", "alice")]).unwrap()));
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(axum::http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        let ext = Extensions::new();
        assert_eq!(
            operators.identify(&with("Bearer op-token-0123456789"), &ext).await.unwrap(),
            Operator("alice".into())
        );
        assert_eq!(operators.identify(&with("Bearer customer-token"), &ext).await.unwrap_err().status.as_u16(), 401);
        assert_eq!(operators.identify(&HeaderMap::new(), &ext).await.unwrap_err().status.as_u16(), 401);
        assert!(TokenTable::operators([("short", "bob")]).is_err());
        assert_eq!(
            format!("{:?}", TokenTable::operators([("op-token-0123456789", "a")]).unwrap()),
            "TokenTable(1 tokens)"
        );
        assert_eq!(
            OperatorAuth::Nobody.identify(&with("Bearer op-token-0123456789"), &ext).await.unwrap_err().status.as_u16(),
            401
        );
    }
}
