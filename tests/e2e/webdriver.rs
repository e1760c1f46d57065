//! Headless Chromium for the dashboard tests, driven through chromedriver
//! with `fantoccini`.
//!
//! Each [`Browser`] starts its own chromedriver on a free port and one
//! headless Chromium session (Debian's `chromium` and `chromium-driver`
//! packages; `.ci/run` installs them when missing). Without them a test is
//! skipped with a printed reason, except with `CI=true`, where that is a
//! failure. Every wait polls for what it needs for up to [`WAIT`]: no fixed
//! sleeps, so a loaded machine only makes the suite slower.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{elements::Element, error::CmdError, Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// How long any one wait for the page lasts.
pub const WAIT: Duration = Duration::from_secs(20);

/// The browser and its driver: Debian's paths, or `BOXCAR_CHROMIUM` and
/// `BOXCAR_CHROMEDRIVER` when set.
fn chromium() -> String {
    std::env::var("BOXCAR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

fn chromedriver() -> String {
    std::env::var("BOXCAR_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into())
}

/// A chromedriver process and a Chromium session; both end when dropped.
pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    /// The `serve` address pages are loaded from (`127.0.0.1:PORT`).
    base: String,
}

/// Whether Chromium and chromedriver are installed; `false` (with a printed
/// reason) outside CI, a panic with `CI=true`.
fn installed() -> bool {
    let missing: Vec<String> = [chromium(), chromedriver()]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{missing:?} missing and CI=true: the dashboard's browser tests must run in CI (apt-get install chromium chromium-driver)"
    );
    eprintln!(
        "skipping: {missing:?} missing (apt-get install chromium chromium-driver to run the dashboard's browser tests)"
    );
    false
}

impl Browser {
    /// A headless Chromium session for pages of `serve_listen`, or `None`
    /// when the browser is not installed (outside CI).
    pub fn start(serve_listen: &str) -> Option<Self> {
        if !installed() {
            return None;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let port = crate::harness::free_port();
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let capabilities = json!({
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-dev-shm-usage", "--window-size=1280,1600",
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let mut browser = Self {
            runtime,
            client: None,
            driver,
            base: serve_listen.to_string(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            let attempt = browser.runtime.block_on(
                ClientBuilder::new(connector)
                    .capabilities(capabilities.clone())
                    .connect(&url),
            );
            match attempt {
                Ok(client) => break client,
                Err(_) if started.elapsed() < WAIT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("no Chromium session from chromedriver within {WAIT:?}: {e}"),
            }
        };
        browser.client = Some(client);
        Some(browser)
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    /// Loads the dashboard at `fragment` (e.g. `#jobs?status=failed`).
    pub fn open(&self, fragment: &str) {
        let url = format!("http://{}/{fragment}", self.base);
        self.runtime
            .block_on(self.client().goto(&url))
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// Runs `script` in the page and returns its value.
    pub fn script(&self, script: &str) -> Value {
        self.runtime
            .block_on(self.client().execute(script, Vec::new()))
            .unwrap_or_else(|e| panic!("script {script:?}: {e}"))
    }

    /// The rendered text of the first element matching `css` (empty when
    /// it is not displayed), if there is one. Read in one script, so a
    /// re-render mid-read cannot tear it.
    pub fn text(&self, css: &str) -> Option<String> {
        let value = self.runtime.block_on(self.client().execute(
            "const e = document.querySelector(arguments[0]); \
             return e ? (e.getClientRects().length ? e.innerText : '') : null;",
            vec![Value::from(css)],
        ));
        value.ok().and_then(|v| v.as_str().map(str::to_string))
    }

    /// The rendered texts of every element matching `css` (empty when not
    /// displayed), read at once.
    pub fn texts(&self, css: &str) -> Vec<String> {
        let value = self
            .runtime
            .block_on(self.client().execute(
                "return Array.from(document.querySelectorAll(arguments[0]), \
                   e => e.getClientRects().length ? e.innerText : '');",
                vec![Value::from(css)],
            ))
            .unwrap_or_else(|e| panic!("texts of `{css}`: {e}"));
        value
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|t| t.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until `check` returns `Some`, polling the page.
    pub fn until<T>(&self, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(value) = check(self) {
                return value;
            }
            if started.elapsed() > WAIT {
                let body = self.text("body").unwrap_or_default();
                panic!("timed out after {WAIT:?} waiting for {what}; the page shows:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the element `css` shows text satisfying `ok`; returns it.
    pub fn until_text(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        self.until(&format!("the text of `{css}`"), |b| {
            b.text(css).filter(|t| ok(t))
        })
    }

    /// Waits for a visible element `css`.
    fn visible(&self, css: &str) -> Element {
        self.until(&format!("a visible `{css}`"), |b| {
            b.runtime.block_on(async {
                let element = b.client().find(Locator::Css(css)).await.ok()?;
                element
                    .is_displayed()
                    .await
                    .ok()
                    .filter(|shown| *shown)
                    .map(|_| element)
            })
        })
    }

    /// Clicks the element `css` once it is visible; again if the page
    /// re-rendered it between finding and clicking (a stale element).
    pub fn click(&self, css: &str) {
        self.until(&format!("a click on `{css}`"), |b| {
            let element = b.visible(css);
            b.runtime.block_on(element.click()).ok()
        });
    }

    /// Types `text` into the input `css` (after clearing it).
    pub fn type_into(&self, css: &str, text: &str) {
        let element = self.visible(css);
        self.runtime
            .block_on(async {
                element.clear().await?;
                element.send_keys(text).await
            })
            .unwrap_or_else(|e| panic!("type into `{css}`: {e}"));
    }

    /// Chooses `value` in the select `css`.
    pub fn select(&self, css: &str, value: &str) {
        let element = self.visible(css);
        self.runtime
            .block_on(element.select_by_value(value))
            .unwrap_or_else(|e| panic!("select {value} in `{css}`: {e}"));
    }

    /// The text of the open alert/confirm/prompt dialog, if one is open.
    pub fn dialog(&self) -> Option<String> {
        match self.runtime.block_on(self.client().get_alert_text()) {
            Ok(text) => Some(text),
            Err(CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::NoSuchAlert =>
            {
                None
            }
            Err(e) => panic!("asking for a dialog: {e}"),
        }
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        self.runtime
            .block_on(self.client().current_url())
            .map(|u| u.to_string())
            .unwrap_or_else(|e| panic!("current url: {e}"))
    }

    /// Saves a screenshot of the page as `target/dashboard-screenshots/NAME.png`.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .runtime
            .block_on(self.client().screenshot())
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        eprintln!("screenshot: {}", path.display());
        path
    }
}

/// `target/dashboard-screenshots` of this workspace (or of `CARGO_TARGET_DIR`).
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("dashboard-screenshots")
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
