use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn the_demo_profile_is_valid_and_added_by_default() {
    ModelProfile::demo()
        .validate(DEMO_PROFILE, &no_env)
        .unwrap();
    let profiles = ModelProfiles::new([], &no_env).unwrap();
    assert_eq!(
        profiles.list(),
        vec![ProfileInfo {
            name: "demo".into(),
            kind: ProfileKind::Scripted
        }]
    );
}

#[test]
fn names_are_checked() {
    for bad in ["", "-x", "a b", "ü", &"x".repeat(65)] {
        assert!(
            ModelProfile::demo().validate(bad, &no_env).is_err(),
            "{bad}"
        );
    }
    for good in ["a", "gpt-4o", "local_1.5", "9b"] {
        ModelProfile::demo().validate(good, &no_env).unwrap();
    }
}

#[test]
fn scripts_are_checked_element_by_element() {
    let profile = |script: Vec<Value>| {
        ModelProfile::Scripted(ScriptedProfile {
            script,
            instructions: None,
            loop_settings: LoopSettings::default(),
            price: None,
            compaction_at: None,
            fallback: Vec::new(),
        })
    };
    let error = |script: Vec<Value>| {
        profile(script)
            .validate("s", &no_env)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error(vec![]),
        "model profile `s`: `script` must hold at least one response"
    );
    assert_eq!(
        error(vec![json!({"content": "ok"}), json!({"content": 1})]),
        "model profile `s`: `script[1]`: Invalid model response: content must be a string"
    );
    assert_eq!(
        error(vec![json!("{nope")]),
        "model profile `s`: `script[0]`: not valid JSON (key must be a string at line 1 column 2)"
    );
    assert_eq!(
        error(vec![json!({"content": "", "delay_ms": -1})]),
        "model profile `s`: `script[0]`: `delay_ms` must be a nonnegative integer"
    );
    profile(vec![
        json!({"error": "boom"}),
        json!("{\"content\": \"fine\", \"delay_ms\": 5}"),
    ])
    .validate("s", &no_env)
    .unwrap();
}

#[test]
fn the_loops_switches_are_read_for_every_kind_and_written_back() {
    let http: ModelProfile = toml::from_str(
        "kind = \"openai\"\nmodel = \"m\"\ndraft_first = true\ncheck_answers = false\n",
    )
    .unwrap();
    let expected = LoopSettings {
        draft_first: Some(true),
        check_answers: Some(false),
        write_code_blocks: None,
        question_unchanged: None,
    };
    assert_eq!(http.loop_settings(), expected);
    let written = toml::to_string(&http).unwrap();
    let read: ModelProfile = toml::from_str(&written).unwrap();
    assert_eq!(read.loop_settings(), expected, "{written}");
    assert!(!written.contains("write_code_blocks"), "{written}");

    let scripted: ModelProfile = toml::from_str(
        "kind = \"scripted\"\nscript = [{content = \"hi\"}]\nwrite_code_blocks = true\n",
    )
    .unwrap();
    assert_eq!(scripted.loop_settings().write_code_blocks, Some(true));
    let wrong = toml::from_str::<ModelProfile>("kind = \"openai\"\ndraft_first = \"yes\"\n");
    assert!(wrong.is_err());
}

#[test]
fn fallback_chains_are_followed_each_profile_once_and_checked() {
    let profile = |fallback: &[&str]| {
        let text = format!(
            "kind = \"scripted\"\nscript = [{{content = \"hi\"}}, {{unavailable = \"529\"}}]\nfallback = {fallback:?}"
        );
        toml::from_str::<ModelProfile>(&text).unwrap()
    };
    let profiles = |pairs: &[(&str, &[&str])]| {
        ModelProfiles::new(
            pairs
                .iter()
                .map(|(name, fallback)| ((*name).to_owned(), profile(fallback))),
            &no_env,
        )
    };
    let ready = profiles(&[
        ("a", &["b", "c"]),
        ("b", &["d", "c"]),
        ("c", &[]),
        ("d", &["demo"]),
    ])
    .unwrap();
    let chain = |name: &str| ready.get(name).unwrap().fallback().to_vec();
    assert_eq!(chain("a"), ["b", "d", "demo", "c"]);
    assert_eq!(chain("c"), Vec::<String>::new());
    let fallbacks = ready.fallbacks("a").unwrap();
    assert_eq!(fallbacks.from, "a");
    assert_eq!(fallbacks.chain.len(), 4);
    assert!(ready.fallbacks("c").is_none());
    // Written back as written.
    assert!(
        toml::to_string(&profile(&["x"]))
            .unwrap()
            .contains("fallback = [\"x\"]")
    );

    let error = profiles(&[("a", &["b"]), ("b", &["nope"])]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`fallback` of `b` names `nope`, which is not a model profile"),
        "{error}"
    );
    let error = profiles(&[("a", &["a"])]).unwrap_err();
    assert!(error.to_string().contains("cycle: a -> a"), "{error}");
    let error = profiles(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]).unwrap_err();
    assert!(
        error.to_string().contains("cycle: a -> b -> c -> b"),
        "{error}"
    );
}
