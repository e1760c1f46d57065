//! Network namespaces of one test: each host gets a namespace of its own,
//! joined to the root namespace by a veth pair on a /30 of its own inside a
//! /24 picked for this run, so a host's only way out is its own link, which
//! the test can cut and restore. Traffic stays between the namespaces of
//! this machine (no routes beyond the veth pairs).
//!
//! Names (namespaces, devices) and the subnet are unique per test run, and
//! everything is removed when the `Network` is dropped, pass or fail.
//!
//! Needs root and `ip` (iproute2). Where a namespace cannot be made the
//! test is skipped with a printed reason, except with `CI=true`, where that
//! is a failure.

use std::process::{Command, Output};

use crate::harness::describe;

/// Where iproute2's `ip` lives on Debian.
const IP: &str = "/usr/sbin/ip";

/// One host's namespace and its link to the root namespace.
pub struct Link {
    pub host: String,
    pub namespace: String,
    root_dev: String,
    ns_dev: String,
    /// The root namespace's end of the link (what the host connects to).
    pub root_ip: String,
}

/// The namespaces of one test; removed when dropped.
pub struct Network {
    links: Vec<Link>,
    /// The /24 holding every link, e.g. `10.123.45.0/24`.
    pub subnet: String,
}

impl Network {
    /// A namespace per host in `hosts`, or `None` (with a printed reason)
    /// when this machine cannot make one and `CI` is not set.
    pub fn create(hosts: &[&str]) -> Option<Self> {
        let token = run_token();
        let (second, third) = (100 + token % 100, (token >> 8) % 256);
        let mut network = Self {
            links: Vec::new(),
            subnet: format!("10.{second}.{third}.0/24"),
        };
        if let Err(reason) = network.add_links(hosts, token, (second, third)) {
            drop(network);
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but the partition test cannot make network namespaces: {reason}"
            );
            eprintln!("skipping a partition test: cannot make network namespaces: {reason}");
            return None;
        }
        Some(network)
    }

    fn add_links(&mut self, hosts: &[&str], token: u32, (b, c): (u32, u32)) -> Result<(), String> {
        if !std::path::Path::new(IP).exists() {
            return Err(format!("{IP} (Debian package iproute2) is missing"));
        }
        for (n, host) in hosts.iter().enumerate() {
            let link = Link {
                host: (*host).to_string(),
                namespace: format!("boxcar-e2e-{}-{token:06x}-{host}", std::process::id()),
                root_dev: format!("bx{token:06x}{n}r"),
                ns_dev: format!("bx{token:06x}{n}n"),
                root_ip: format!("10.{b}.{c}.{}", 4 * n + 1),
            };
            let ns_ip = format!("10.{b}.{c}.{}", 4 * n + 2);
            let (ns, root_dev, ns_dev, root_ip) = (
                link.namespace.clone(),
                link.root_dev.clone(),
                link.ns_dev.clone(),
                link.root_ip.clone(),
            );
            ip(&["netns", "add", &ns])?;
            self.links.push(link);
            let (ns, root_dev, ns_dev) = (&ns, &root_dev, &ns_dev);
            ip(&[
                "link", "add", root_dev, "type", "veth", "peer", "name", ns_dev, "netns", ns,
            ])?;
            ip(&["addr", "add", &format!("{root_ip}/30"), "dev", root_dev])?;
            ip(&["link", "set", root_dev, "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ns_ip}/30"),
                "dev",
                ns_dev,
            ])?;
            ip(&["-n", ns, "link", "set", ns_dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The link of `host`.
    pub fn link(&self, host: &str) -> &Link {
        self.links
            .iter()
            .find(|l| l.host == host)
            .unwrap_or_else(|| panic!("no namespace for host {host}"))
    }

    /// The root namespace's addresses, one per link.
    pub fn root_ips(&self) -> Vec<String> {
        self.links.iter().map(|l| l.root_ip.clone()).collect()
    }

    /// The program and arguments that run a command inside `host`'s
    /// namespace.
    pub fn exec_prefix(&self, host: &str) -> Vec<String> {
        vec![
            IP.into(),
            "netns".into(),
            "exec".into(),
            self.link(host).namespace.clone(),
        ]
    }

    /// Takes the root namespace's end of `host`'s link down: the link
    /// loses its carrier and every packet either way is dropped without an
    /// answer until [`restore`](Self::restore). Open connections are not
    /// reset and new ones get no reply: both stall, as across a real
    /// partition (taking the host's own end down instead would make its
    /// new connections fail at once for want of a route).
    pub fn cut(&self, host: &str) {
        let link = self.link(host);
        ip(&["link", "set", &link.root_dev, "down"]).expect("cut the link");
    }

    /// Brings the root namespace's end of `host`'s link back up.
    pub fn restore(&self, host: &str) {
        let link = self.link(host);
        ip(&["link", "set", &link.root_dev, "up"]).expect("restore the link");
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for link in &self.links {
            let _ = Command::new(IP)
                .args(["netns", "del", &link.namespace])
                .output();
            let _ = Command::new(IP)
                .args(["link", "del", &link.root_dev])
                .output();
        }
    }
}

/// 24 bits that differ between test runs (process id and clock).
fn run_token() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) & 0x00ff_ffff
}

fn ip(args: &[&str]) -> Result<Output, String> {
    let output = Command::new(IP)
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!("ip {args:?} failed:\n{}", describe(&output)))
    }
}
