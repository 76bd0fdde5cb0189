//! The streaming entry point's pure parts: which paths are long-running, its config, and the JWT verifier against RS256 keys generated here (claims, the authorizer's rules, the key cache's fetches, an issuer that is down or silent).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize, PublicKeyComponents};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use jsonwebtoken::jwk::JwkSet;
use serde_json::{Value, json};
use swarm_adapters::config::AuthConfig;

use super::jwt::*;
use super::*;

const ISSUER: &str = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Test";
const AUDIENCE: &str = "app-client-1";

/// An RS256 signing key of the test's issuer, named `kid`.
pub(crate) struct SigningKey {
    kid: String,
    pair: KeyPair,
}

impl SigningKey {
    pub(crate) fn generate(kid: &str) -> Self {
        Self { kid: kid.to_owned(), pair: KeyPair::generate(KeySize::Rsa2048).unwrap() }
    }

    /// Its public half as a JWK.
    pub(crate) fn jwk(&self) -> Value {
        let public = PublicKeyComponents::<Vec<u8>>::from(self.pair.public_key());
        json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
               "n": URL_SAFE_NO_PAD.encode(&public.n), "e": URL_SAFE_NO_PAD.encode(&public.e)})
    }

    /// A compact JWS of `claims` with header `{"alg", "kid"}` (signed here, not by the crate under test).
    pub(crate) fn sign(&self, alg: &str, kid: Option<&str>, claims: &Value) -> String {
        let mut header = json!({"alg": alg, "typ": "JWT"});
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.pair.public_modulus_len()];
        self.pair.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut signature).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// A token of this key with `claims`.
    pub(crate) fn token(&self, claims: &Value) -> String {
        self.sign("RS256", Some(&self.kid), claims)
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Claims that pass: the issuer, the audience, an hour left.
pub(crate) fn good_claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now() - 10, "exp": now() + 3600})
}

/// A JWKS whose answer the test sets, counting fetches.
pub(crate) struct TestJwks {
    answer: Mutex<Result<Value, JwksError>>,
    fetches: AtomicUsize,
    /// Never answers (the fetch deadline must cut it).
    silent: bool,
}

impl TestJwks {
    pub(crate) fn of(keys: &[&SigningKey]) -> Arc<Self> {
        Arc::new(Self { answer: Mutex::new(Ok(set(keys))), fetches: AtomicUsize::new(0), silent: false })
    }

    pub(crate) fn answer(&self, answer: Result<Value, JwksError>) {
        *self.answer.lock().unwrap() = answer;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn set(keys: &[&SigningKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()})
}

impl JwksSource for TestJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, JwksError>> {
        Box::pin(async move {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            if self.silent {
                std::future::pending::<()>().await;
            }
            let answer = self.answer.lock().unwrap().clone();
            answer.map(|v| serde_json::from_value(v).unwrap())
        })
    }
}

pub(crate) fn rules() -> JwtRules {
    JwtRules { issuer: ISSUER.into(), audience: AUDIENCE.into() }
}

pub(crate) fn verifier(source: Arc<TestJwks>) -> JwtVerifier {
    JwtVerifier::new(rules(), source).unwrap()
}

fn refused(result: Result<serde_json::Map<String, Value>, VerifyError>) -> String {
    match result {
        Err(VerifyError::Invalid(reason)) => reason,
        other => panic!("want Invalid, got {other:?}"),
    }
}

#[test]
fn long_running_routes_match_whole_segments() {
    assert!(is_long_running("/v1/chat/completions"));
    assert!(is_long_running("/v1/models"));
    assert!(!is_long_running("/v1/chat/completions/x"));
    assert!(!is_long_running("/v1/"));
    assert!(!is_long_running("/conversations"));
    assert!(!is_long_running("/approvals/a1"));
    // The console's page and reads: GET only.
    assert!(is_served_on_url(&Method::GET, "/console") && is_served_on_url(&Method::GET, "/console/console.js"));
    assert!(is_served_on_url(&Method::GET, "/conversations") && is_served_on_url(&Method::GET, "/conversations/c1"));
    assert!(!is_served_on_url(&Method::POST, "/conversations") && !is_served_on_url(&Method::GET, "/conversations/"));
    assert!(
        !is_served_on_url(&Method::GET, "/approvals") && !is_served_on_url(&Method::POST, "/conversations/c1/messages")
    );
    assert!(is_served_on_url(&Method::POST, "/v1/chat/completions"));
    assert!(matches_route("/conversations/{id}/events", "/conversations/c-1/events"));
    assert!(!matches_route("/conversations/{id}/events", "/conversations//events"));
    assert!(!matches_route("/conversations/{id}/events", "/conversations/c-1"));
}

#[test]
fn jwt_mode_needs_an_https_issuer_and_an_audience() {
    let jwt = AuthConfig::from_lookup(|k| (k == "AUTH_MODE").then(|| "jwt".to_owned())).unwrap();
    let parse = |pairs: &[(&str, &str)]| {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        StreamConfig::from_lookup(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()), &jwt)
    };
    let c = parse(&[("JWT_ISSUER", ISSUER), ("JWT_AUDIENCE", AUDIENCE)]).unwrap();
    assert_eq!((c.rules, c.jwks_url), (Some(rules()), None));
    let e = parse(&[("JWT_AUDIENCE", AUDIENCE)]).unwrap_err().to_string();
    assert!(e.starts_with("JWT_ISSUER is required"), "{e}");
    let e = parse(&[("JWT_ISSUER", ISSUER)]).unwrap_err().to_string();
    assert!(e.starts_with("JWT_AUDIENCE is required"), "{e}");
    let e = parse(&[("JWT_ISSUER", "http://issuer.example.com"), ("JWT_AUDIENCE", "a")]).unwrap_err().to_string();
    assert!(e.starts_with("JWT_ISSUER must be an https URL"), "{e}");
    let none = AuthConfig::from_lookup(|_| None).unwrap();
    assert_eq!(StreamConfig::from_lookup(|_| None, &none).unwrap(), StreamConfig::default(), "no JWT: nothing read");
    assert_eq!(HttpJwks::default_url(&format!("{ISSUER}/")), format!("{ISSUER}/.well-known/jwks.json"));
}

#[tokio::test]
async fn a_valid_token_gives_its_claims_and_the_keys_are_fetched_once() {
    let key = SigningKey::generate("k1");
    let jwks = TestJwks::of(&[&key]);
    let v = verifier(jwks.clone());
    let claims = v.verify(&key.token(&good_claims("user-1"))).await.unwrap();
    assert_eq!(claim_text(&claims, "sub").as_deref(), Some("user-1"));
    v.verify(&key.token(&good_claims("user-2"))).await.unwrap();
    assert_eq!(jwks.fetches(), 1, "the second token is verified from the cache");
}

#[tokio::test]
async fn the_authorizers_rules_refuse_the_wrong_issuer_audience_time_and_algorithm() {
    let key = SigningKey::generate("k1");
    let v = verifier(TestJwks::of(&[&key]));
    let with = |name: &str, value: Value| {
        let mut claims = good_claims("user-1");
        claims[name] = value;
        key.token(&claims)
    };
    assert!(refused(v.verify(&with("iss", json!("https://evil.example.com"))).await).contains("Issuer"));
    assert!(refused(v.verify(&with("aud", json!("another-client"))).await).contains("audience"));
    assert!(refused(v.verify(&with("exp", json!(now() - 120))).await).contains("Expired"));
    assert!(refused(v.verify(&with("nbf", json!(now() + 600))).await).contains("Immature"));
    assert!(refused(v.verify(&with("iat", json!(now() + 600))).await).contains("iat"));
    let mut no_exp = good_claims("user-1");
    no_exp.as_object_mut().unwrap().remove("exp");
    assert!(refused(v.verify(&key.token(&no_exp)).await).contains("exp"));
    // An audience list, and Cognito's access tokens (client_id, no aud), pass as API Gateway lets them.
    v.verify(&with("aud", json!(["other", AUDIENCE]))).await.unwrap();
    let mut access = good_claims("user-1");
    access.as_object_mut().unwrap().remove("aud");
    access["client_id"] = json!(AUDIENCE);
    v.verify(&key.token(&access)).await.unwrap();
    access["client_id"] = json!("another-client");
    refused(v.verify(&key.token(&access)).await);
    // Only RS256, only with a kid, only signed by the key.
    assert!(refused(v.verify(&key.sign("HS256", Some("k1"), &good_claims("u"))).await).contains("RS256"));
    assert!(refused(v.verify(&key.sign("RS256", None, &good_claims("u"))).await).contains("kid"));
    let other = SigningKey::generate("k1");
    assert!(refused(v.verify(&other.token(&good_claims("u"))).await).contains("Signature"));
    refused(v.verify("not.a.token").await);
}

#[tokio::test]
async fn an_unknown_kid_is_fetched_again_once_then_refused() {
    let (old, rotated) = (SigningKey::generate("old"), SigningKey::generate("new"));
    let jwks = TestJwks::of(&[&old]);
    let v = verifier(jwks.clone());
    v.verify(&old.token(&good_claims("u"))).await.unwrap();
    // The issuer rotates: a token of the new key makes one fetch, which finds it.
    jwks.answer(Ok(set(&[&old, &rotated])));
    v.verify(&rotated.token(&good_claims("u"))).await.unwrap();
    assert_eq!(jwks.fetches(), 2);
    // A made-up kid right after: no fetch (at most one per UNKNOWN_KID_REFETCH), refused.
    let stranger = SigningKey::generate("made-up");
    assert!(refused(v.verify(&stranger.token(&good_claims("u"))).await).contains("kid"));
    assert_eq!(jwks.fetches(), 2, "unknown kids do not hammer the issuer");
}

#[tokio::test(start_paused = true)]
async fn unknown_kids_make_one_fetch_per_refetch_gap() {
    let key = SigningKey::generate("k1");
    let jwks = TestJwks::of(&[&key]);
    let v = verifier(jwks.clone());
    v.verify(&key.token(&good_claims("u"))).await.unwrap();
    let stranger = SigningKey::generate("made-up");
    refused(v.verify(&stranger.token(&good_claims("u"))).await);
    refused(v.verify(&stranger.token(&good_claims("u"))).await);
    assert_eq!(jwks.fetches(), 2, "one refetch for the unknown kid, then the gap holds");
    tokio::time::advance(UNKNOWN_KID_REFETCH).await;
    refused(v.verify(&stranger.token(&good_claims("u"))).await);
    assert_eq!(jwks.fetches(), 3, "after the gap, one more");
    v.verify(&key.token(&good_claims("u"))).await.unwrap();
    assert_eq!(jwks.fetches(), 3, "a known kid never fetches while the keys are fresh");
}

#[tokio::test]
async fn an_issuer_that_is_down_is_a_transient_error_never_a_refusal() {
    let key = SigningKey::generate("k1");
    let jwks = TestJwks::of(&[&key]);
    jwks.answer(Err(JwksError::Unavailable("connection refused".into())));
    let v = verifier(jwks.clone());
    let e = v.verify(&key.token(&good_claims("u"))).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert_eq!(e, VerifyError::KeysUnavailable(JwksError::Unavailable("connection refused".into())));
    // A malformed answer is the operator's to fix, and still not the caller's fault.
    jwks.answer(Err(JwksError::Malformed("not a JWKS".into())));
    let e = v.verify(&key.token(&good_claims("u"))).await.unwrap_err();
    assert!(e.is_transient() && !JwksError::Malformed(String::new()).is_transient(), "{e:?}");
    // Back up: the next token fetches again and passes.
    jwks.answer(Ok(set(&[&key])));
    v.verify(&key.token(&good_claims("u"))).await.unwrap();
    assert_eq!(jwks.fetches(), 3);
}

#[tokio::test(start_paused = true)]
async fn stale_keys_verify_while_the_issuer_is_down_until_max_stale() {
    let key = SigningKey::generate("k1");
    let jwks = TestJwks::of(&[&key]);
    let v = verifier(jwks.clone());
    v.verify(&key.token(&good_claims("u"))).await.unwrap();
    jwks.answer(Err(JwksError::Unavailable("503".into())));
    tokio::time::advance(KEYS_TTL).await;
    v.verify(&key.token(&good_claims("u"))).await.unwrap();
    assert_eq!(jwks.fetches(), 2, "expired keys are fetched again");
    tokio::time::advance(MAX_STALE).await;
    assert!(v.verify(&key.token(&good_claims("u"))).await.unwrap_err().is_transient());
}

#[tokio::test(start_paused = true)]
async fn a_silent_issuer_is_cut_at_the_fetch_deadline() {
    let key = SigningKey::generate("k1");
    let jwks = Arc::new(TestJwks { answer: Mutex::new(Ok(set(&[&key]))), fetches: AtomicUsize::new(0), silent: true });
    let v = verifier(jwks);
    let started = tokio::time::Instant::now();
    let e = v.verify(&key.token(&good_claims("u"))).await.unwrap_err();
    assert!(matches!(e, VerifyError::KeysUnavailable(JwksError::Unavailable(_))), "{e:?}");
    assert_eq!(started.elapsed(), FETCH_DEADLINE);
}
