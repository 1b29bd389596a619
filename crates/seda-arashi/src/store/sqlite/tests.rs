use super::*;
use crate::store::hash_password;

fn msg(subject: &str, body: &str, date: i64) -> NewMessage {
    NewMessage {
        sender: "Alice <alice@example.org>".into(),
        recipients: "user1@arashi.local".into(),
        subject: subject.into(),
        date,
        body: body.into(),
    }
}

#[test]
fn folders_list_show_move_delete_search_send() {
    let dir = tempfile::tempdir().unwrap();
    let st = SqliteStore::open(&dir.path().join("mail.db")).unwrap();
    let a = st.add_user("user1", &hash_password("pw", 1)).unwrap();
    let b = st.add_user("user2", &hash_password("pw2", 1)).unwrap();
    assert!(st.add_user("user1", "x").is_err());
    assert_eq!(st.authenticate("user1", "pw").unwrap(), Some(a.clone()));
    assert_eq!(st.authenticate("user1", "nope").unwrap(), None);
    assert_eq!(st.authenticate("nobody", "pw").unwrap(), None);
    let batch: Vec<_> = (0..30)
        .map(|i| {
            (
                a.id,
                FolderRole::Inbox,
                msg(&format!("subject {i:02}"), "hello penguin world", 1000 + i),
            )
        })
        .chain([(
            b.id,
            FolderRole::Inbox,
            msg("secret", "penguin of user2", 5),
        )])
        .collect();
    st.deliver_batch(&batch).unwrap();
    let folders = st.folders(a.id).unwrap();
    let names: Vec<&str> = folders.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["Inbox", "Archive", "Sent", "Trash"]);
    assert_eq!((folders[0].messages, folders[0].unseen), (30, 30));
    let inbox = folders[0].id;
    let page = st
        .list(
            a.id,
            inbox,
            &ListQuery {
                page: 2,
                per_page: 25,
                ..ListQuery::default()
            },
        )
        .unwrap();
    assert_eq!((page.page, page.pages, page.messages.len()), (2, 2, 5));
    assert_eq!(page.messages[0].subject, "subject 04", "newest first");
    let asc = st
        .list(
            a.id,
            inbox,
            &ListQuery {
                sort: SortKey::Subject,
                ascending: true,
                ..ListQuery::default()
            },
        )
        .unwrap();
    assert_eq!(asc.messages[0].subject, "subject 00");
    let id = asc.messages[0].id;
    // The other user's folder and message are out of reach.
    let b_inbox = st.folder_of_role(b.id, FolderRole::Inbox).unwrap();
    assert!(matches!(
        st.list(a.id, b_inbox, &ListQuery::default()),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(st.message(b.id, id), Err(StoreError::NotFound(_))));
    assert!(matches!(st.delete(b.id, id), Err(StoreError::NotFound(_))));
    assert!(matches!(
        st.move_to(b.id, id, b_inbox),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        st.move_to(a.id, id, b_inbox),
        Err(StoreError::NotFound(_))
    ));
    let m = st.message(a.id, id).unwrap();
    assert_eq!(m.body, "hello penguin world");
    assert_eq!(st.folders(a.id).unwrap()[0].unseen, 29, "shown is seen");
    let archive = st.folder_of_role(a.id, FolderRole::Archive).unwrap();
    st.move_to(a.id, id, archive).unwrap();
    assert_eq!(st.message(a.id, id).unwrap().folder_name, "Archive");
    assert_eq!(st.delete(a.id, id).unwrap(), Deleted::ToTrash);
    assert_eq!(st.delete(a.id, id).unwrap(), Deleted::Removed);
    assert!(st.message(a.id, id).is_err());
    // Search: only the user's own mail, FTS syntax is inert, snippets marked.
    let hits = st.search(a.id, "penguin", SearchField::All, 50).unwrap();
    assert_eq!(hits.len(), 29);
    assert!(hits[0].snippet.contains(MATCH_START) && hits[0].snippet.contains(MATCH_END));
    assert!(
        st.search(a.id, "secret", SearchField::Subject, 50)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        st.search(a.id, "subject", SearchField::Subject, 50)
            .unwrap()
            .len(),
        29
    );
    assert!(
        st.search(a.id, "penguin", SearchField::Sender, 50)
            .unwrap()
            .is_empty()
    );
    assert!(
        st.search(a.id, "\" OR * NEAR(", SearchField::All, 5)
            .is_ok()
    );
    assert!(matches!(
        st.search(a.id, " ** ", SearchField::All, 5),
        Err(StoreError::Invalid(_))
    ));
    // Send: into the recipient's Inbox and the sender's Sent.
    assert!(matches!(
        st.send(&a, "nobody", "s", "b"),
        Err(StoreError::Invalid(_))
    ));
    st.send(&a, "user2@arashi.local", "hi there", "body")
        .unwrap();
    let bf = st.folders(b.id).unwrap();
    assert_eq!((bf[0].messages, bf[0].unseen), (2, 2));
    assert_eq!(st.folders(a.id).unwrap()[2].messages, 1);
    // Sessions.
    let s = st.create_session(&a).unwrap();
    assert_eq!(s.id.len(), 32);
    assert_eq!(st.session(&s.id).unwrap(), Some(s.clone()));
    st.end_session(&s.id).unwrap();
    assert_eq!(st.session(&s.id).unwrap(), None);
    assert_eq!(st.user_count().unwrap(), 2);
}
