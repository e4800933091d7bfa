//! C#: classes, structs, interfaces and records with their bases, `this`/`base`, bare calls
//! of the class's own methods, `using A = B.C` aliases, and typed locals, parameters and fields.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&CSHARP];

pub static CSHARP: Lang = Lang {
    name: "csharp",
    extensions: &["cs"],
    interpreters: &[],
    grammar: || tree_sitter_c_sharp::LANGUAGE.into(),
    tags: &[tree_sitter_c_sharp::TAGS_QUERY],
    query: &[QUERY],
    rules: Rules {
        self_names: &["this", "base"],
        implicit_self: true,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(namespace_declaration name: (_) @module)
(file_scoped_namespace_declaration name: (_) @module)
(namespace_declaration name: (_) @name) @definition.module
(class_declaration name: (identifier) @name (base_list [(identifier) @base (qualified_name name: (identifier) @base) (generic_name (identifier) @base)])?) @definition.class
(interface_declaration name: (identifier) @name (base_list [(identifier) @base (qualified_name name: (identifier) @base) (generic_name (identifier) @base)])?) @definition.interface
(struct_declaration name: (identifier) @name (base_list [(identifier) @base (qualified_name name: (identifier) @base) (generic_name (identifier) @base)])?) @definition.struct
(record_declaration name: (identifier) @name) @definition.class
(enum_declaration name: (identifier) @name) @definition.enum
(delegate_declaration name: (identifier) @name) @definition.type
(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(local_function_statement name: (identifier) @name) @definition.function
(field_declaration (modifier) @m (variable_declaration (variable_declarator name: (identifier) @name)) (#eq? @m "const")) @definition.constant

(invocation_expression function: [(identifier) @name (generic_name (identifier) @name)]) @reference.call
(invocation_expression function: (member_access_expression expression: (_) @receiver name: [(identifier) @name (generic_name (identifier) @name)])) @reference.call
(object_creation_expression type: [(identifier) @name (qualified_name name: (identifier) @name) (generic_name (identifier) @name)]) @reference.new

(using_directive name: (identifier) @import.alias (qualified_name qualifier: (_) @import.module name: (identifier) @import.name)) @import

(variable_declaration type: [(identifier) (qualified_name) (generic_name)] @bind.type (variable_declarator name: (identifier) @bind.name))
(variable_declarator name: (identifier) @bind.name (object_creation_expression type: (_) @bind.type))
(parameter type: (_) @bind.type name: (identifier) @bind.name)
(field_declaration (variable_declaration type: [(identifier) (qualified_name) (generic_name)] @bind.type (variable_declarator name: (identifier) @bind.field)))
(property_declaration type: [(identifier) (qualified_name) (generic_name)] @bind.type name: (identifier) @bind.field)
"#;
