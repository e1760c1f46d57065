//! Fetches `{"url": "..."}` with the SDK's HTTP helper (needs the URL's
//! origin in `capabilities.http`) and returns `{"title", "status", "url"}`.
//! A refused origin fails the job terminally; other HTTP failures retry.

use boxcar_guest::{http, info, terminal, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Fetch {
    url: String,
}

#[derive(Serialize)]
struct Fetched {
    title: Option<String>,
    status: u16,
    url: String,
}

fn fetch_title(job: Job<Fetch>) -> Result<Fetched, Error> {
    let response = match http::get(&job.payload.url) {
        Ok(r) => r,
        Err(e @ (http::HttpError::Denied { .. } | http::HttpError::InvalidUrl(_))) => {
            return Err(terminal(e.to_string()).code("http-refused").into())
        }
        Err(e) => return Err(e.into()),
    };
    info!("{} answered {}", response.url, response.status);
    let title = title(&String::from_utf8_lossy(&response.body));
    Ok(Fetched {
        title,
        status: response.status,
        url: response.url,
    })
}

/// The text of the first `<title>` element, whitespace collapsed.
fn title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let text = html.get(start..end)?;
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

boxcar_guest::handler!(fetch_title);
