//! Workspace downloads and listings hold bounded memory whatever a
//! command left in the workspace (SPEC section 6): a download streams from
//! the open file, a tenant has at most `[limits] max_concurrent_downloads`
//! under way, and a listing names at most 10,000 files.

use std::io::Write;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::connections::{PATIENCE, connect_to};
use crate::helpers::*;

/// A finished run, and its workspace directory on disk.
async fn finished_run(remote: &Remote, dir: &tempfile::TempDir) -> (String, std::path::PathBuf) {
    let run = remote
        .post_json(
            "/v1/runs?wait=true",
            &json!({"prompt": "p", "workspace": {"files": {"seed.txt": "x"}},
                    "model": {"scripted": [{"content": "done"}]}}),
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let workspace = dir.path().join("workspaces").join(&id);
    assert!(workspace.is_dir());
    (id, workspace)
}

/// Starts a download of `path` and reads no more than the answer's head.
async fn stalled_download(address: &str, id: &str, path: &str) -> (tokio::net::TcpStream, String) {
    let mut stream = connect_to(address).await;
    let request = format!("GET /v1/runs/{id}/workspace/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut byte))
            .await
            .expect("an answer in time")
            .unwrap();
        head.push(byte[0]);
    }
    (stream, String::from_utf8(head).unwrap())
}

/// Three downloads of a 160 MiB file a command made raised the server's
/// peak memory by 480 MiB: each was read whole first. Now each holds a
/// chunk, so three (even unread ones) grow it by a few MiB; a fourth past
/// the tenant's share of three is answered 429 until one ends; and the
/// file still downloads whole, byte for byte.
#[tokio::test]
async fn downloads_stream_from_the_file_and_a_tenant_has_a_share_of_them() {
    const MIB: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let (server, address) = start_binary_with(
        &dir,
        &[("AGENT_RUNNER_LIMITS__MAX_CONCURRENT_DOWNLOADS", "3")],
    );
    let remote = Remote::new(address.clone());
    let (id, workspace) = finished_run(&remote, &dir).await;
    // What a command would have left there.
    let mut file = std::fs::File::create(workspace.join("big.bin")).unwrap();
    let block: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
    for _ in 0..160 {
        file.write_all(&block).unwrap();
    }
    drop(file);

    let before = peak_mib(server.id());
    let mut downloads = Vec::new();
    for _ in 0..3 {
        let (stream, head) = stalled_download(&address, &id, "big.bin").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-length: {}", 160 * MIB)),
            "{head}"
        );
        downloads.push(stream);
    }
    let (_refused, head) = stalled_download(&address, &id, "seed.txt").await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
    let grown = peak_mib(server.id()).saturating_sub(before);
    assert!(
        grown < 48,
        "three downloads of a 160 MiB file grew the server by {grown} MiB"
    );

    // One ends (its client goes away): its share comes back.
    downloads.pop();
    let answer = eventually("the share to come back", async || {
        let answer = remote
            .get(&format!("/v1/runs/{id}/workspace/seed.txt"))
            .await;
        if answer.status() == 429 {
            return None;
        }
        Some(answer)
    })
    .await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.bytes().await.unwrap().as_ref(), b"x");
    downloads.clear();
    let whole = remote
        .get(&format!("/v1/runs/{id}/workspace/big.bin"))
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(whole.len(), 160 * MIB);
    assert!(whole.chunks(MIB).all(|chunk| chunk == block.as_slice()));
    let grown = peak_mib(server.id()).saturating_sub(before);
    assert!(
        grown < 48,
        "a whole download grew the server by {grown} MiB"
    );
}

/// A listing names the first 10,000 files by path and says there are more.
#[tokio::test]
async fn a_listing_is_capped_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_binary_with(&dir, &[]);
    let remote = Remote::new(address);
    let (id, workspace) = finished_run(&remote, &dir).await;
    let many = workspace.join("many");
    std::fs::create_dir(&many).unwrap();
    for n in 0..10_050 {
        std::fs::File::create(many.join(format!("{n:05}"))).unwrap();
    }
    let listing = remote.get_json(&format!("/v1/runs/{id}/workspace")).await;
    let files = listing["files"].as_array().unwrap();
    assert_eq!(files.len(), 10_000);
    assert_eq!(listing["truncated"], true);
    assert_eq!(files[0]["path"], "many/00000");
    assert_eq!(files[9_999]["path"], "many/09999");

    std::fs::remove_dir_all(&many).unwrap();
    let listing = remote.get_json(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(listing["truncated"], false);
    assert_eq!(listing["files"], json!([{"path": "seed.txt", "size": 1}]));
}
