//! Kotlin: classes, interfaces and objects with their supertypes, `this`, bare calls of the
//! class's own methods, companion objects (their functions are the class's: `Repo.open()`),
//! `import a.b.C` and `import a.b.f as g`, and receivers typed by a declaration (`val r: Repo`,
//! a parameter, a `val` constructor parameter) or by a constructor call (`val c = Cache()`).
//! A lambda or anonymous function bound to a `val` is a function of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&KOTLIN];

pub static KOTLIN: Lang = Lang {
    name: "kotlin",
    extensions: &["kt", "kts"],
    interpreters: &["kotlin"],
    grammar: || tree_sitter_kotlin_ng::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this", "super"],
        implicit_self: true,
        ..Rules::NONE
    },
};

// `import a.b.*` binds no name: the grammar parses it as `a.b` and a star, so it is left out.
// A companion object is no definition of its own, so that its functions nest in the class and
// `Repo.open()` reaches them. Kotlin has no `new`: a call of a capitalized name is taken as a
// constructor when typing a variable (classes are named in PascalCase); a lowercase one types
// nothing.
const QUERY: &str = r#"
(package_header (qualified_identifier) @module)
(class_declaration "interface" name: (identifier) @name) @definition.interface
(class_declaration (modifiers (class_modifier) @enum (#eq? @enum "enum")) name: (identifier) @name) @definition.enum
(class_declaration name: (identifier) @name (delegation_specifiers (delegation_specifier [(user_type (identifier) @base) (constructor_invocation (user_type (identifier) @base))]))?) @definition.class
(object_declaration name: (identifier) @name (delegation_specifiers (delegation_specifier [(user_type (identifier) @base) (constructor_invocation (user_type (identifier) @base))]))?) @definition.class
(function_declaration name: (identifier) @name) @definition.function
(property_declaration (variable_declaration (identifier) @name) [(lambda_literal) (anonymous_function)]) @definition.function
(source_file (property_declaration (modifiers (property_modifier)) (variable_declaration (identifier) @name)) @definition.constant)

(call_expression . (identifier) @name) @reference.call
(call_expression . (navigation_expression (_) @receiver . (identifier) @name .)) @reference.call

((import (qualified_identifier (identifier) @import.name .) @import.module . (identifier)? @import.alias) @import (#not-match? @import "[*]"))

(parameter (identifier) @bind.name [(user_type) (nullable_type)] @bind.type)
(class_parameter ["val" "var"] (identifier) @bind.field [(user_type) (nullable_type)] @bind.type)
(property_declaration (variable_declaration (identifier) @bind.name [(user_type) (nullable_type)] @bind.type))
(property_declaration (variable_declaration (identifier) @bind.name .) (call_expression . (identifier) @bind.type) (#match? @bind.type "^[A-Z]"))
(class_body (property_declaration (variable_declaration (identifier) @bind.field [(user_type) (nullable_type)] @bind.type)))
(class_body (property_declaration (variable_declaration (identifier) @bind.field .) (call_expression . (identifier) @bind.type) (#match? @bind.type "^[A-Z]")))
"#;
