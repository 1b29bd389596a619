use super::*;

fn req_from(peer: &str, headers: &[(&str, &str)]) -> Request {
    let mut r = Request::get("/x");
    r.peer = Some(peer.parse().unwrap());
    r.headers = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
        .collect();
    r
}

#[test]
fn class_from_header_then_cookie_then_prefix() {
    let rules = ClassRules {
        header: Some("X-Class".into()),
        cookie: Some("class".into()),
        prefixes: vec![
            ("127.0.0.2/32".parse().unwrap(), 3),
            ("127.0.0.0/8".parse().unwrap(), 1),
            ("::1/128".parse().unwrap(), 5),
        ],
    };
    let at = |peer, h: &[(&str, &str)]| rules.class_of(&req_from(peer, h));
    assert_eq!(at("127.0.0.2:5", &[("x-class", " 2 ")]), 2, "header first");
    assert_eq!(
        at(
            "127.0.0.2:5",
            &[("X-Class", "nope"), ("Cookie", "a=b; class=4")]
        ),
        4,
        "a bad header falls through to the cookie"
    );
    assert_eq!(at("127.0.0.2:5", &[("Cookie", "class=\"6\"")]), 6);
    assert_eq!(
        at("127.0.0.2:5", &[("Cookie", "xclass=7; klass=1")]),
        3,
        "other cookies do not count; the first matching prefix wins"
    );
    assert_eq!(at("127.9.9.9:5", &[]), 1);
    assert_eq!(at("[::1]:5", &[]), 5);
    assert_eq!(at("[::ffff:127.0.0.2]:5", &[]), 3, "IPv4-mapped peer");
    assert_eq!(at("10.0.0.1:5", &[("X-Class", "300")]), 0, "out of range");
    assert_eq!(
        ClassRules::default().class_of(&req_from("1.2.3.4:1", &[])),
        0
    );
}

#[test]
fn class_header_and_cookie_names_must_be_tokens() {
    let rules = |h: &str, c: &str| ClassRules {
        header: Some(h.into()),
        cookie: Some(c.into()),
        prefixes: Vec::new(),
    };
    assert!(rules("X-Class", "class").validate().is_ok());
    for (h, c) in [
        ("bad name", "c"),
        ("", "c"),
        ("X:Class", "c"),
        ("X-Class", "a b"),
        ("X-Cläss", "c"),
    ] {
        let e = rules(h, c).validate().unwrap_err().to_string();
        assert!(e.contains("not a valid"), "{h:?} {c:?}: {e}");
    }
    let oc = OverloadControl {
        classes: rules("bad name", "c"),
        ..OverloadControl::default()
    };
    assert!(
        oc.validate(["hello"]).is_err(),
        "validate checks the class rules"
    );
}

#[test]
fn address_prefixes_parse_and_match() {
    let p: AddrPrefix = "10.1.0.0/16".parse().unwrap();
    assert!(p.contains("10.1.200.3".parse().unwrap()));
    assert!(!p.contains("10.2.0.1".parse().unwrap()));
    assert!(!p.contains("::1".parse().unwrap()));
    let all: AddrPrefix = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains("8.8.8.8".parse().unwrap()));
    let v6: AddrPrefix = "2001:db8::/32".parse().unwrap();
    assert!(v6.contains("2001:db8:1::9".parse().unwrap()));
    assert!(!v6.contains("2001:db9::1".parse().unwrap()));
    assert_eq!(v6.to_string(), "2001:db8::/32");
    for bad in [
        "10.0.0.0",
        "10.0.0.0/33",
        "::/129",
        "nope/8",
        "10.0.0.0/x",
        "",
    ] {
        let e = bad.parse::<AddrPrefix>().unwrap_err().to_string();
        assert!(e.contains("bad address prefix") && !e.contains('\n'), "{e}");
    }
    assert!(matches!(
        "10.0.0.0".parse::<AddrPrefix>(),
        Err(PrefixError::NoLength(s)) if s == "10.0.0.0"
    ));
    assert!(matches!(
        "nope/8".parse::<AddrPrefix>(),
        Err(PrefixError::Address(_))
    ));
    assert!(matches!(
        "::/129".parse::<AddrPrefix>(),
        Err(PrefixError::Length { max: 128, .. })
    ));
    assert!(matches!(
        "10.0.0.0/33".parse::<AddrPrefix>(),
        Err(PrefixError::Length { max: 32, .. })
    ));
}

#[test]
fn policy_names_round_trip_and_unknown_is_one_line() {
    for a in Admission::ALL {
        assert_eq!(a.name().parse::<Admission>().unwrap(), a);
    }
    let e = "bogus".parse::<Admission>().unwrap_err();
    assert_eq!((e.setting(), e.got()), ("admission policy", "bogus"));
    let e = e.to_string();
    assert!(e.contains("bogus") && e.contains("response-time") && !e.contains('\n'));
}

#[test]
fn each_stage_gets_its_own_policy_of_the_chosen_kind() {
    let mut oc = OverloadControl {
        rt_target: Some(Duration::from_millis(500)),
        ..OverloadControl::default()
    };
    assert_eq!(oc.policy_kind("a"), Admission::DelayBudget);
    let a = oc.policy_for("a").unwrap().unwrap();
    let b = oc.policy_for("b").unwrap().unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(a.name(), "delay-budget");
    assert_eq!(a.state().target_ms, Some(500.0));
    oc.classes.header = Some("X-Class".into());
    assert_eq!(
        oc.policy_for("a").unwrap().unwrap().name(),
        "delay-budget",
        "the default policy ranks classes itself"
    );
    oc.admission = Some(Admission::ResponseTime);
    assert_eq!(oc.policy_for("a").unwrap().unwrap().name(), "multiclass");
    oc.admission = None;
    oc.handlers.push(HandlerTargets {
        name: "a".into(),
        rt_target: Some(Duration::from_millis(100)),
        class_targets: vec![Duration::from_millis(1000), Duration::from_millis(200)],
    });
    let st = oc.policy_for("a").unwrap().unwrap().state();
    let targets: Vec<f64> = st.classes.iter().map(|c| c.target_ms).collect();
    assert_eq!(targets, [1000.0, 200.0]);
    assert_eq!(oc.target_for("a"), Some(Duration::from_millis(100)));
    assert_eq!(oc.target_for("b"), Some(Duration::from_millis(500)));
    for (kind, name) in [
        (Admission::CoDel, "codel"),
        (Admission::Gradient, "gradient"),
        (Admission::Aimd, "aimd"),
        (Admission::QueueThreshold, "queue-threshold"),
    ] {
        oc.admission = Some(kind);
        assert_eq!(oc.policy_for("b").unwrap().unwrap().name(), name);
    }
    assert!(
        !oc.quality_for("b").unwrap().with_admission,
        "paper's order"
    );
    oc.admission = None;
    assert!(oc.quality_for("b").unwrap().with_admission, "the default's");
    oc.admission = Some(Admission::None);
    assert!(oc.policy_for("b").unwrap().is_none());
    assert_eq!(oc.quality_for("b").unwrap().reenable_after, None);
    assert!(!oc.quality_for("b").unwrap().with_admission);
}

#[test]
fn a_policy_that_needs_a_target_refuses_to_build_without_one() {
    for kind in [
        Admission::ResponseTime,
        Admission::Multiclass,
        Admission::DelayBudget,
    ] {
        let oc = OverloadControl {
            admission: Some(kind),
            ..OverloadControl::default()
        };
        let e = oc.policy_for("bottleneck").err().unwrap().to_string();
        assert!(
            e.contains("needs a response-time target") && !e.contains('\n'),
            "{e}"
        );
    }
    let oc = OverloadControl {
        degrade: true,
        ..OverloadControl::default()
    };
    assert!(oc.quality_for("bottleneck").is_err());
    let oc = OverloadControl {
        handlers: vec![HandlerTargets {
            name: "nosuch".into(),
            ..HandlerTargets::default()
        }],
        ..OverloadControl::default()
    };
    let e = oc
        .validate(["bottleneck", "hello"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("nosuch"), "{e}");
}
