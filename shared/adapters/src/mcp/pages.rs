//! The one `tools/list` pager: follows `nextCursor` page after page, up to [`MAX_LIST_PAGES`] — the worker listing the tool gateway and the gateway listing each upstream.

use std::future::Future;

use rmcp::model::{ListToolsResult, Tool};
use swarm_core::ports::ToolError;

/// Most pages of `tools/list` followed before giving up: a server that keeps returning a cursor
/// must not loop forever.
pub const MAX_LIST_PAGES: usize = 50;

/// A server answered a cursor on every one of [`MAX_LIST_PAGES`] pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tools/list did not finish within {MAX_LIST_PAGES} pages")]
pub struct TooManyPages;

/// A listing that never ends is the server's fault, not worth a retry.
impl From<TooManyPages> for ToolError {
    fn from(e: TooManyPages) -> Self {
        ToolError::Permanent(e.to_string())
    }
}

/// Every tool of a paginated listing, in the server's order: `page(cursor)` asks for one page
/// (`None`: the first). Errors: the first error of `page`, or [`TooManyPages`] as the caller's error.
pub async fn list_all_pages<E, F, Fut>(mut page: F) -> Result<Vec<Tool>, E>
where
    E: From<TooManyPages>,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<ListToolsResult, E>>,
{
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let answer = page(cursor.take()).await?;
        tools.extend(answer.tools);
        match answer.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    Err(TooManyPages.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "", std::sync::Arc::new(serde_json::Map::new()))
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_end_and_an_endless_cursor_stops() {
        let mut asked = Vec::new();
        let tools = list_all_pages::<TooManyPages, _, _>(|cursor| {
            asked.push(cursor.clone());
            let next = match cursor.as_deref() {
                None => Some("2".to_owned()),
                _ => None,
            };
            let mut page = ListToolsResult::with_all_items(vec![tool(&format!("t{}", asked.len()))]);
            page.next_cursor = next;
            async move { Ok(page) }
        })
        .await
        .unwrap();
        assert_eq!(tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(), ["t1", "t2"]);
        assert_eq!(asked, [None, Some("2".to_owned())]);
        let mut pages = 0;
        let endless = list_all_pages::<TooManyPages, _, _>(|_| {
            pages += 1;
            let mut page = ListToolsResult::with_all_items(vec![]);
            page.next_cursor = Some("again".into());
            async move { Ok(page) }
        })
        .await;
        assert_eq!((endless.unwrap_err(), pages), (TooManyPages, MAX_LIST_PAGES));
    }
}
